# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""service_host runs as Ansible runs it, with a fake podman: the image and the snapshot checked in one call,
the cache set and the backup directory made only when both are there, nothing written in check mode."""

import os
import stat

import pytest

from inkling_test_helpers import run_module, standin_hub

IMAGE = 'registry.example.com/vllm/vllm-openai@sha256:' + 'a' * 64
REPO_ID = 'thinkingmachines/Inkling-NVFP4'
REV = 'c' * 40
SUBDIRS = ['triton', 'vllm']


@pytest.fixture
def host(tmp_path):
    """A host: a fake podman holding IMAGE (its rc from $FAKE_PODMAN_RC, else 0 for IMAGE and 1 for any other),
    a hub cache holding the snapshot, and the paths the role passes."""
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    podman = bindir / 'podman'
    podman.write_text('#!/bin/sh\necho "$@" >> %s\n'
                      '[ -n "$FAKE_PODMAN_RC" ] && { echo "Error: boom" >&2; exit "$FAKE_PODMAN_RC"; }\n'
                      '[ "$1 $2 $3" = "image exists %s" ] && exit 0\nexit 1\n' % (tmp_path / 'podman.log', IMAGE))
    podman.chmod(podman.stat().st_mode | stat.S_IXUSR)
    hub = standin_hub(tmp_path, REPO_ID, REV)
    root = tmp_path / 'cache'
    return dict(tmp=tmp_path, podman=str(podman), hub=hub, root=root, cache_dir=root / 'sm90-patched' / ('a' * 64),
                backup=tmp_path / 'state' / 'service')


def run(h, check_mode=False, env=None, **over):
    args = dict(image=IMAGE, hub_cache_dir=str(h['hub']), repo_id=REPO_ID, revision=REV,
                cache_root=str(h['root']), cache_dir=str(h['cache_dir']), subdirs=SUBDIRS,
                backup_dir=str(h['backup']), executable=h['podman'])
    args.update(over)
    return run_module('service_host', args, tmp_path=h['tmp'], check_mode=check_mode, env=env)


def mode(path):
    return oct(os.stat(str(path)).st_mode & 0o7777)


def test_present_then_idempotent(host):
    rc, res = run(host)
    assert rc == 0, res
    assert res['image_present'] and res['snapshot_present'] and res['prepared'] and res['changed']
    assert res['snapshot_path'] == str(host['hub'] / 'models--thinkingmachines--Inkling-NVFP4' / 'snapshots' / REV
                                       / 'config.json')
    cache_dir = host['cache_dir']
    assert res['created'] == [str(host['root']), str(cache_dir.parent), str(cache_dir), str(cache_dir / 'triton'),
                              str(cache_dir / 'vllm'), str(host['backup'].parent), str(host['backup'])]
    for path in res['created']:
        assert mode(path) == '0o750' and os.stat(path).st_uid == 0
    # one podman call
    assert (host['tmp'] / 'podman.log').read_text() == 'image exists %s\n' % IMAGE
    rc, res = run(host)
    assert rc == 0 and not res['changed'] and res['created'] == [] and res['fixed'] == []


def test_owner_and_mode_set_again(host):
    run(host)
    os.chmod(str(host['backup']), 0o755)
    os.chmod(str(host['cache_dir'] / 'vllm'), 0o777)
    rc, res = run(host, check_mode=True)
    assert rc == 0 and res['changed'] and res['fixed'] == [str(host['cache_dir'] / 'vllm'), str(host['backup'])]
    assert mode(host['backup']) == '0o755'
    rc, res = run(host)
    assert rc == 0 and res['changed'] and res['fixed'] == [str(host['cache_dir'] / 'vllm'), str(host['backup'])]
    assert mode(host['backup']) == '0o750' and mode(host['cache_dir'] / 'vllm') == '0o750'


def test_check_mode_writes_nothing_and_reports_what_it_would_make(host):
    rc, res = run(host, check_mode=True)
    assert rc == 0 and res['changed'] and res['prepared'] and len(res['created']) == 7
    assert not host['root'].exists() and not host['backup'].parent.exists()
    # a preview before staging: the image is not pulled yet, the directories are reported all the same
    rc, res = run(host, check_mode=True, image=IMAGE.replace('a' * 64, 'b' * 64))
    assert rc == 0 and not res['image_present'] and res['snapshot_present'] and len(res['created']) == 7
    assert not host['root'].exists()


@pytest.mark.parametrize('what', ['image', 'snapshot', 'dangling'])
def test_nothing_is_written_when_something_is_missing(host, what):
    over = {}
    if what == 'image':
        over['image'] = IMAGE.replace('a' * 64, 'b' * 64)
    elif what == 'snapshot':
        over['revision'] = 'd' * 40
    else:  # config.json links into blobs/, and its blob is gone
        config = host['hub'] / 'models--thinkingmachines--Inkling-NVFP4' / 'snapshots' / REV / 'config.json'
        os.unlink(os.path.realpath(str(config)))
    rc, res = run(host, **over)
    assert rc == 0 and not res['changed'] and not res['prepared'] and res['created'] == []
    assert res['image_present'] == (what != 'image') and res['snapshot_present'] == (what == 'image')
    assert not host['root'].exists() and not host['backup'].parent.exists()


def test_podman_failing_fails_the_task(host):
    rc, res = run(host, env={'FAKE_PODMAN_RC': '125'})
    assert rc == 1 and res['msg'] == 'service_host: podman image exists failed (rc=125): Error: boom'
    assert not host['root'].exists()


def test_a_cache_set_outside_its_root_or_a_file_in_the_way(host):
    rc, res = run(host, cache_dir='/elsewhere/x')
    assert rc == 1 and res['msg'] == 'service_host: /elsewhere/x is not under cache_root %s' % host['root']
    host['backup'].parent.mkdir()
    host['backup'].write_text('a file')
    rc, res = run(host)
    assert rc == 1 and res['msg'] == 'service_host: %s is not a directory' % host['backup']


def test_a_linked_cache_subdirectory_is_refused(host, tmp_path):
    run(host)
    victim = tmp_path / 'victim'
    victim.mkdir(mode=0o755)
    (host['cache_dir'] / 'triton').rmdir()
    os.symlink(str(victim), str(host['cache_dir'] / 'triton'))
    for check_mode in (True, False):
        rc, res = run(host, check_mode=check_mode)
        assert rc == 1 and 'is a symbolic link where a directory is expected' in res['msg'], res
    assert mode(victim) == '0o755'
