# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""compile_cache and page_cache_warm run as Ansible runs them: keys, seeding over HTTP from a
real local server, pruning, and the page-cache warm-up decision."""

import functools
import http.server
import json
import os
import shutil
import threading

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache as wc
from inkling_test_helpers import run_module

SUBDIRS = ['triton', 'vllm']
KEY = wc.cache_key('sm90-patched', 'sha256:' + '1' * 64, 'NVIDIA H200', 8, '580.159.04', 8)
OTHER = wc.cache_key('sm90-patched', 'sha256:' + '1' * 64, 'NVIDIA H200', 8, '590.48.01', 8)


def make_set(path, files):
    for sub in SUBDIRS:
        (path / sub).mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    return path


@pytest.fixture
def served(tmp_path):
    """A source set with the key written, served over HTTP as the rollout serves it."""
    src = make_set(tmp_path / 'src', {'vllm/torch_compile_cache/a/rank0': b'kernel-0' * 100,
                                      'vllm/torch_compile_cache/a/rank1': b'kernel-1' * 100,
                                      'triton/abc/k.cubin': b'\x00\x01'})
    rc, res = run_module('compile_cache', {'state': 'claimed', 'cache_dir': str(src), 'subdirs': SUBDIRS,
                                           'key': KEY}, tmp_path=tmp_path)
    assert rc == 0 and res['changed']
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(src))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield src, 'http://127.0.0.1:%d' % server.server_address[1]
    server.shutdown()


def listed(src, tmp_path):
    rc, res = run_module('compile_cache', {'state': 'listed', 'cache_dir': str(src), 'subdirs': SUBDIRS, 'key': KEY},
                         tmp_path=tmp_path)
    assert rc == 0, res
    return res


def seed(dest, url, manifest, tmp_path, key=None, check_mode=False):
    return run_module('compile_cache', {'state': 'seeded', 'cache_dir': str(dest), 'subdirs': SUBDIRS,
                                        'key': key or KEY, 'manifest': manifest, 'source_url': url},
                      tmp_path=tmp_path, check_mode=check_mode)


def claim(dest, tmp_path, key=None):
    return run_module('compile_cache', {'state': 'claimed', 'cache_dir': str(dest), 'subdirs': SUBDIRS,
                                        'key': key or KEY}, tmp_path=tmp_path)


def test_seed_copies_and_verifies_every_file(served, tmp_path):
    src, url = served
    res = listed(src, tmp_path)
    assert [f['path'] for f in res['files']] == ['triton/abc/k.cubin', 'vllm/torch_compile_cache/a/rank0',
                                                 'vllm/torch_compile_cache/a/rank1']
    dest = make_set(tmp_path / 'dest', {})
    assert claim(dest, tmp_path)[1]['changed']
    rc, out = seed(dest, url, res['files'], tmp_path, check_mode=True)
    assert rc == 0 and out['changed'] and not out['seeded'] and not (dest / 'vllm' / 'torch_compile_cache').exists()
    rc, out = seed(dest, url, res['files'], tmp_path)
    assert rc == 0 and out['changed'] and out['seeded'], out
    assert out['bytes'] == 1602
    assert (dest / 'vllm/torch_compile_cache/a/rank1').read_bytes() == b'kernel-1' * 100
    assert not (dest / '.inkling-seeding').exists()
    # idempotent: a set that holds caches is left alone
    rc, out = seed(dest, url, res['files'], tmp_path)
    assert rc == 0 and not out['changed'] and 'already holds' in out['reason']


def test_a_wrong_file_leaves_the_set_empty(served, tmp_path):
    src, url = served
    manifest = listed(src, tmp_path)['files']
    (src / 'vllm/torch_compile_cache/a/rank1').write_bytes(b'changed after listing')
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path)
    rc, out = seed(dest, url, manifest, tmp_path)
    assert rc == 0 and not out['changed'] and not out['seeded']
    assert 'starts cold' in out['reason'] and 'rank1' in out['reason']
    # nothing half-copied: rank 0's file is not there either (a hit on one rank only deadlocks)
    assert wc.set_is_empty(str(dest), SUBDIRS)
    assert not (dest / '.inkling-seeding').exists()


def test_unreachable_source_starts_cold(served, tmp_path):
    src, dummy = served
    manifest = listed(src, tmp_path)['files']
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path)
    rc, out = seed(dest, 'http://127.0.0.1:9', manifest, tmp_path)
    assert rc == 0 and not out['seeded'] and wc.set_is_empty(str(dest), SUBDIRS)


def test_seeding_claims_first_a_set_of_another_key_is_emptied(served, tmp_path):
    src, url = served
    manifest = listed(src, tmp_path)['files']
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path, key=OTHER)
    (dest / 'vllm' / 'built-for-another-driver').write_bytes(b'x')
    rc, out = seed(dest, url, manifest, tmp_path)
    assert rc == 0 and out['seeded'], out
    assert not (dest / 'vllm' / 'built-for-another-driver').exists()
    assert json.loads((dest / wc.KEY_FILE).read_text())['id'] == KEY['id']


def test_seeding_without_a_source_only_claims(tmp_path):
    dest = make_set(tmp_path / 'dest', {})
    rc, out = run_module('compile_cache', {'state': 'seeded', 'cache_dir': str(dest), 'subdirs': SUBDIRS, 'key': KEY},
                         tmp_path=tmp_path)
    assert rc == 0 and out['changed'] and not out['seeded'] and 'no source given' in out['reason']
    assert json.loads((dest / wc.KEY_FILE).read_text())['id'] == KEY['id']
    rc, out = run_module('compile_cache', {'state': 'seeded', 'cache_dir': str(dest), 'subdirs': SUBDIRS, 'key': KEY},
                         tmp_path=tmp_path)
    assert rc == 0 and not out['changed']


def test_served_lists_and_says_where_check_mode(served, tmp_path):
    src, dummy = served
    rc, out = run_module('compile_cache', {'state': 'served', 'cache_dir': str(src), 'subdirs': SUBDIRS, 'key': KEY,
                                           'address': 'fd00::5', 'port': 8874, 'token': 'seed-token-1234'}, tmp_path=tmp_path,
                         check_mode=True)
    assert rc == 0 and out['url'] == 'http://[fd00::5]:8874' and len(out['files']) == 3


def test_present_creates_the_set_in_one_call(tmp_path):
    root = tmp_path / 'cache'
    args = {'state': 'present', 'cache_root': str(root), 'cache_dir': str(root / 'sm100' / ('a' * 64)),
            'subdirs': SUBDIRS}
    rc, out = run_module('compile_cache', args, tmp_path=tmp_path, check_mode=True)
    assert rc == 0 and out['changed'] and not root.exists()
    rc, out = run_module('compile_cache', args, tmp_path=tmp_path)
    assert rc == 0 and out['changed'] and len(out['created']) == 5
    assert oct(os.stat(str(root / 'sm100' / ('a' * 64) / 'triton')).st_mode & 0o7777) == '0o750'
    rc, out = run_module('compile_cache', args, tmp_path=tmp_path)
    assert rc == 0 and not out['changed']
    os.chmod(str(root / 'sm100'), 0o755)
    rc, out = run_module('compile_cache', args, tmp_path=tmp_path)
    assert rc == 0 and out['changed'] and out['fixed'] == [str(root / 'sm100')]
    rc, out = run_module('compile_cache', dict(args, cache_dir='/elsewhere'), tmp_path=tmp_path)
    assert rc == 1 and 'not under cache_root' in out['msg']


def test_manifest_escaping_the_set_fails_before_anything(served, tmp_path):
    dummy, url = served
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path)
    rc, out = seed(dest, url, [{'path': '../../etc/x', 'size': 1, 'sha256': 'a' * 64}], tmp_path)
    assert rc == 1 and 'not inside a cache subdirectory' in out['msg']


def test_claim_empties_a_set_of_another_key(tmp_path):
    dest = make_set(tmp_path / 'dest', {'vllm/old': b'built for another driver'})
    rc, out = claim(dest, tmp_path, key=OTHER)
    assert rc == 0 and out['changed'] and 'before keys were kept' in out['reason']
    assert (dest / 'vllm/old').exists()  # the host's own set, filled before keys: kept
    rc, out = claim(dest, tmp_path)
    assert rc == 0 and out['changed'] and 'driver_version 590.48.01 -> 580.159.04' in out['reason']
    assert wc.set_is_empty(str(dest), SUBDIRS)
    assert json.loads((dest / wc.KEY_FILE).read_text())['id'] == KEY['id']
    rc, out = claim(dest, tmp_path)
    assert rc == 0 and not out['changed']


def test_listing_refuses_a_set_of_another_key(tmp_path):
    src = make_set(tmp_path / 'src', {'vllm/a': b'x'})
    claim(src, tmp_path, key=OTHER)
    rc, out = run_module('compile_cache', {'state': 'listed', 'cache_dir': str(src), 'subdirs': SUBDIRS, 'key': KEY},
                         tmp_path=tmp_path)
    assert rc == 1 and 'expected %s' % KEY['id'] in out['msg']


def test_a_forged_key_id_fails(tmp_path):
    src = make_set(tmp_path / 'src', {})
    rc, out = claim(src, tmp_path, key=dict(KEY, driver_version='590.48.01'))
    assert rc == 1 and 'does not match its fields' in out['msg']


def test_prune_keeps_running_and_rollback(tmp_path):
    root = tmp_path / 'cache'
    for variant, digest in (('sm90-patched', 'a'), ('sm90-patched', 'b'), ('sm90-patched', 'c'), ('sm100', 'a')):
        (root / variant / (digest * 64) / 'vllm').mkdir(parents=True)
    (root / 'sm90-patched' / 'not-a-digest').mkdir()
    keep = [['sm90-patched', 'c' * 64], ['sm90-patched', 'a' * 64]]
    rc, out = run_module('compile_cache', {'state': 'pruned', 'cache_root': str(root), 'keep': keep},
                         tmp_path=tmp_path, check_mode=True)
    assert rc == 0 and out['changed'] and (root / 'sm100' / ('a' * 64)).exists()
    rc, out = run_module('compile_cache', {'state': 'pruned', 'cache_root': str(root), 'keep': keep}, tmp_path=tmp_path)
    assert rc == 0 and out['removed'] == [['sm100', 'a' * 64], ['sm90-patched', 'b' * 64]]
    assert sorted(os.listdir(str(root / 'sm90-patched'))) == sorted(['a' * 64, 'c' * 64, 'not-a-digest'])
    rc, out = run_module('compile_cache', {'state': 'pruned', 'cache_root': str(root), 'keep': keep}, tmp_path=tmp_path)
    assert rc == 0 and not out['changed']


def snapshot(tmp_path, sizes):
    repo = tmp_path / 'hub' / 'models--org--name'
    snap = repo / 'snapshots' / ('f' * 40)
    (repo / 'blobs').mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, size in enumerate(sizes):
        blob = repo / 'blobs' / ('%064d' % i)
        blob.write_bytes(b'w' * size)
        (snap / ('model-%d.safetensors' % i)).symlink_to(os.path.join('..', '..', 'blobs', blob.name))
    # the same blob twice (two names) is read once
    (snap / 'alias.safetensors').symlink_to(os.path.join('..', '..', 'blobs', '%064d' % 0))
    return tmp_path / 'hub'


def warm(tmp_path, avail_kb, total_kb=24 * 1024 * 1024, **kw):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text('MemTotal: %d kB\nMemAvailable: %d kB\n' % (total_kb, avail_kb))
    args = {'cache_dir': str(tmp_path / 'hub'), 'repo_id': 'org/name', 'revision': 'f' * 40,
            'meminfo_path': str(meminfo)}
    args.update(kw)
    return run_module('page_cache_warm', args, tmp_path=tmp_path)


def test_page_cache_warm_reads_the_snapshot_when_memory_allows(tmp_path):
    snapshot(tmp_path, [3 * 1024 * 1024, 1024])
    rc, out = warm(tmp_path, avail_kb=10 * 1024 * 1024)
    assert rc == 0 and not out['changed'] and out['warmed'], out
    assert out['snapshot_bytes'] == out['bytes_warmed'] == 3 * 1024 * 1024 + 1024
    assert out['reason'].startswith('warmed ')


def test_page_cache_warm_skips_without_room(tmp_path):
    snapshot(tmp_path, [1024])
    rc, out = warm(tmp_path, avail_kb=4 * 1024 * 1024)  # 4 GiB available, margin 4 GiB
    assert rc == 0 and not out['warmed'] and out['bytes_warmed'] == 0
    assert out['reason'].startswith('skipped: not enough memory')


def test_page_cache_warm_needs_the_snapshot(tmp_path):
    rc, out = warm(tmp_path, avail_kb=10 * 1024 * 1024)
    assert rc == 1 and 'no snapshot' in out['msg']


# --- The container writes the set: root-side code never follows a link it planted (docs/security.md, S1) ---

@pytest.fixture
def victim(tmp_path):
    """A host directory and file outside the set, which a planted link points at."""
    d = tmp_path / 'host-etc'
    d.mkdir()
    (d / 'passwd').write_text('root:x:0:0::/root:/bin/bash\n')
    os.chmod(str(d), 0o755)
    os.chmod(str(d / 'passwd'), 0o644)
    return d


def test_key_written_through_a_planted_link_replaces_the_link_not_its_target(tmp_path, victim):
    dest = make_set(tmp_path / 'dest', {})
    os.symlink(str(victim / 'passwd'), str(dest / (wc.KEY_FILE + '.tmp')))
    os.symlink(str(victim / 'passwd'), str(dest / wc.KEY_FILE))
    rc, out = claim(dest, tmp_path)
    assert rc == 0 and out['changed'], out
    assert (victim / 'passwd').read_text() == 'root:x:0:0::/root:/bin/bash\n'
    assert oct(os.stat(str(victim / 'passwd')).st_mode & 0o777) == '0o644'
    assert not os.path.islink(str(dest / wc.KEY_FILE))
    assert json.loads((dest / wc.KEY_FILE).read_text())['id'] == KEY['id']


def test_a_subdirectory_that_is_a_link_is_refused_not_emptied(tmp_path, victim):
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path, key=OTHER)
    (dest / 'triton').rmdir()
    os.symlink(str(victim), str(dest / 'triton'))
    rc, out = claim(dest, tmp_path)
    assert rc == 1 and 'triton is a symbolic link where a directory is expected' in out['msg'], out
    assert (victim / 'passwd').exists()


def test_links_inside_a_subdirectory_are_removed_not_followed(tmp_path, victim):
    dest = make_set(tmp_path / 'dest', {'vllm/a': b'x'})
    claim(dest, tmp_path, key=OTHER)
    os.symlink(str(victim), str(dest / 'vllm' / 'dir-link'))
    os.symlink(str(victim / 'passwd'), str(dest / 'vllm' / 'file-link'))
    rc, out = claim(dest, tmp_path)
    assert rc == 0 and out['changed']
    assert os.listdir(str(dest / 'vllm')) == [] and (victim / 'passwd').exists()


def test_present_refuses_a_linked_subdirectory_and_leaves_its_target_alone(tmp_path, victim):
    root = tmp_path / 'cache'
    cache_dir = root / 'sm90-patched' / ('a' * 64)
    args = {'state': 'present', 'cache_root': str(root), 'cache_dir': str(cache_dir), 'subdirs': SUBDIRS}
    assert run_module('compile_cache', args, tmp_path=tmp_path)[0] == 0
    (cache_dir / 'triton').rmdir()
    os.symlink(str(victim), str(cache_dir / 'triton'))
    for check_mode in (True, False):
        rc, out = run_module('compile_cache', args, tmp_path=tmp_path, check_mode=check_mode)
        assert rc == 1 and 'is a symbolic link where a directory is expected' in out['msg'], out
    assert oct(os.stat(str(victim)).st_mode & 0o7777) == '0o755'


def test_listing_leaves_out_a_linked_subdirectory(served, tmp_path, victim):
    src, dummy = served
    shutil.rmtree(str(src / 'triton'))
    os.symlink(str(victim), str(src / 'triton'))
    res = listed(src, tmp_path)
    assert 'triton' in res['left_out']
    assert [f['path'] for f in res['files']] == ['vllm/torch_compile_cache/a/rank0', 'vllm/torch_compile_cache/a/rank1']


def test_seeding_stages_out_of_the_containers_reach(served, tmp_path, victim):
    src, url = served
    manifest = listed(src, tmp_path)['files']
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path)
    os.symlink(str(victim), str(dest / '.inkling-seeding'))  # where staging used to be
    rc, out = seed(dest, url, manifest, tmp_path)
    assert rc == 0 and out['seeded'], out
    assert sorted(os.listdir(str(victim))) == ['passwd']
    assert not os.path.lexists(str(dest / '.inkling-seeding'))
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith('.inkling-seeding')]
    assert (dest / 'vllm/torch_compile_cache/a/rank1').read_bytes() == b'kernel-1' * 100


def test_a_file_larger_than_listed_is_cut_off(served, tmp_path):
    src, url = served
    manifest = listed(src, tmp_path)['files']
    (src / 'triton/abc/k.cubin').write_bytes(b'\x00' * (4 * 1024 * 1024))
    dest = make_set(tmp_path / 'dest', {})
    claim(dest, tmp_path)
    rc, out = seed(dest, url, manifest, tmp_path)
    assert rc == 0 and not out['seeded'] and 'got more than 2 bytes' in out['reason'], out
    assert wc.set_is_empty(str(dest), SUBDIRS)
