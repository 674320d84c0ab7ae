# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""hf_snapshot, hf_download and hf_progress run as Ansible runs them, against the lab's hub test double."""

import importlib.util
import json
import os
import threading
import urllib.request

import pytest

from inkling_test_helpers import COLLECTIONS, run_module

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
REPO_ID = 'thinkingmachines/Inkling-NVFP4'
SHARD = 'model-00002-of-00003.safetensors'


def load(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO_ROOT, 'lab', 'hub', filename))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope='module')
def hub(tmp_path_factory):
    fake_hub = load('fake_hub_m', 'fake_hub.py')
    make_model = load('make_model_m', 'make-model.py')
    root = str(tmp_path_factory.mktemp('hubroot'))
    make_model.main(['--root', root, '--shards', '3', '--shard-kib', '2048'])
    srv = fake_hub.FakeHub(('127.0.0.1', 0), root)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with open(os.path.join(root, 'revisions.json')) as f:
        commit = json.load(f)[REPO_ID]['commit']
    yield {'url': 'http://127.0.0.1:%d' % srv.server_address[1], 'srv': srv, 'commit': commit}
    srv.shutdown()
    srv.server_close()


def control(hub, method, path, body=None):
    req = urllib.request.Request(hub['url'] + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


def snap(tmp_path, hub, cache, phase='plan', check_mode=False, **extra):
    args = {'phase': phase, 'repo_id': REPO_ID, 'revision': 'main', 'cache_dir': cache, 'endpoint': hub['url']}
    args.update(extra)
    return run_module('hf_snapshot', args, tmp_path=tmp_path, check_mode=check_mode)


def download(tmp_path, hub, plan, **extra):
    args = {'plan_file': plan['plan_file'], 'progress_file': plan['progress_file'], 'endpoint': hub['url'],
            'retries': 0, 'stall_timeout_s': 10, 'progress_interval_s': 0.2}
    args.update(extra)
    return run_module('hf_download', args, tmp_path=tmp_path)


def stage(tmp_path, hub, cache, **extra):
    rc, plan = snap(tmp_path, hub, cache, **extra)
    assert rc == 0, plan
    if plan['download']:
        rc, res = download(tmp_path, hub, plan)
        assert rc == 0, res
    rc, fin = snap(tmp_path, hub, cache, phase='finalize', revision=plan['revision'])
    assert rc == 0, fin
    return plan, fin


def test_check_mode_reports_and_writes_nothing(tmp_path, hub):
    cache = str(tmp_path / 'cache')
    rc, res = snap(tmp_path, hub, cache, check_mode=True)
    assert rc == 0, res
    assert res['changed'] is True and res['complete'] is False
    assert res['revision'] == hub['commit'] and res['resolved_from'] == 'hub'
    assert len(res['download']) == res['files_total'] == 10
    assert res['download_bytes'] == res['bytes_total']
    assert not os.path.exists(cache)


def test_stage_verify_and_rerun_without_the_hub(tmp_path, hub):
    cache = str(tmp_path / 'cache')
    plan, fin = stage(tmp_path, hub, cache)
    assert fin['changed'] is True and fin['complete'] is True
    rdir = hc.repo_dir(cache, REPO_ID)
    assert os.path.exists(hc.marker_path(rdir, hub['commit']))
    assert hc.read_ref(rdir, 'main') == hub['commit']
    assert not os.path.exists(hc.plan_path(rdir, hub['commit']))
    with open(os.path.join(rdir, 'snapshots', hub['commit'], 'config.json')) as f:
        assert json.load(f)['model_type'] == 'inkling'
    # the re-run: main is resolved from refs/, checked against the manifest; a dead endpoint is never asked
    rc, again = snap(tmp_path, hub, cache, endpoint='http://127.0.0.1:9')
    assert rc == 0, again
    assert again['complete'] is True and again['changed'] is False
    assert again['resolved_from'] == 'refs' and again['download'] == [] and again['hashed_files'] == 0
    rc, fin2 = snap(tmp_path, hub, cache, phase='finalize', endpoint='http://127.0.0.1:9')
    assert rc == 0 and fin2['changed'] is False
    # full re-hash on request
    rc, full = snap(tmp_path, hub, cache, local_only=True, rehash=True)
    assert rc == 0 and full['complete'] is True and full['hashed_files'] == 10


def test_corrupt_blob_and_missing_link_are_repaired_alone(tmp_path, hub):
    cache = str(tmp_path / 'cache')
    stage(tmp_path, hub, cache)
    rdir = hc.repo_dir(cache, REPO_ID)
    snapdir = os.path.join(rdir, 'snapshots', hub['commit'])
    blob = os.path.realpath(os.path.join(snapdir, SHARD))
    with open(blob, 'r+b') as f:
        f.seek(4096)
        f.write(b'corrupt!')
    os.unlink(os.path.join(snapdir, 'tokenizer.json'))
    control(hub, 'POST', '/_fake/reset')
    rc, plan = snap(tmp_path, hub, cache, local_only=True)
    assert rc == 0 and plan['complete'] is False
    found = sorted((p['path'], p['kind']) for p in plan['problems'])
    assert found == [(SHARD, 'blob_hash'), ('tokenizer.json', 'link_missing')]
    plan, fin = stage(tmp_path, hub, cache)
    assert [d['path'] for d in plan['download']] == [SHARD]
    assert fin['repaired'] == ['tokenizer.json'] and fin['complete'] is True
    stats = control(hub, 'GET', '/_fake/stats')
    assert list(stats['by_path']) == ['%s/%s' % (REPO_ID, SHARD)]


def test_interrupted_download_resumes_across_processes(tmp_path, hub):
    cache = str(tmp_path / 'cache')
    control(hub, 'POST', '/_fake/reset')
    control(hub, 'POST', '/_fake/faults', {'path': SHARD, 'drop_at': 1500000, 'times': 1000})
    try:
        rc, plan = snap(tmp_path, hub, cache)
        rc, res = download(tmp_path, hub, plan)
        assert rc == 1 and 'Remedy: re-run' in res['msg'] and SHARD in res['msg']
        with open(plan['progress_file']) as f:
            prog = json.load(f)
        assert prog['state'] == 'failed' and prog['files_done'] >= 1
    finally:
        control(hub, 'DELETE', '/_fake/faults')
    rdir = hc.repo_dir(cache, REPO_ID)
    etag = [d['etag'] for d in plan['download'] if d['path'] == SHARD][0]
    kept = os.path.getsize(hc.incomplete_path(rdir, etag))
    assert kept == 1024 * 1024            # whole chunks before the cut are kept
    # F11: the partial file is not a complete snapshot
    rc, fin = snap(tmp_path, hub, cache, phase='finalize', revision=plan['revision'])
    assert rc == 1 and 'blob_missing' in json.dumps(fin['problems'])
    control(hub, 'POST', '/_fake/reset')
    plan2, fin = stage(tmp_path, hub, cache)
    assert fin['complete'] is True
    size = [d['size'] for d in plan2['download'] if d['path'] == SHARD][0]
    stats = control(hub, 'GET', '/_fake/stats')
    assert stats['by_path']['%s/%s' % (REPO_ID, SHARD)] == size - kept
    assert stats['range_requests'] == 1
    # files finished before the interruption were not fetched again
    assert len(plan2['download']) < len(plan['download'])
    rc, prog = run_module('hf_progress', {'progress_file': plan2['progress_file'], 'wait_s': 0}, tmp_path=tmp_path)
    assert rc == 0 and prog['finished'] is True and prog['progress']['state'] == 'done'
    assert '(100.0%)' in prog['msg']


def test_f11_incomplete_blob_blocks_the_marker(tmp_path, hub):
    cache = str(tmp_path / 'cache')
    stage(tmp_path, hub, cache)
    rdir = hc.repo_dir(cache, REPO_ID)
    with open(os.path.join(rdir, '.inkling', hub['commit'] + '.json')) as f:
        etag = json.load(f)['files'][0]['etag']
    with open(hc.incomplete_path(rdir, etag), 'wb') as f:
        f.write(b'partial')
    rc, fin = snap(tmp_path, hub, cache, phase='finalize')
    assert rc == 1 and 'partial download left in blobs/' in fin['msg']
    assert not os.path.exists(hc.marker_path(rdir, hub['commit']))


def test_unknown_revision_names_host_and_remedy(tmp_path, hub):
    rc, res = snap(tmp_path, hub, str(tmp_path / 'c'), revision='no-such-branch')
    assert rc == 1
    assert "revision 'no-such-branch' not found in %s" % REPO_ID in res['msg'] and 'Remedy' in res['msg']


def test_local_check_runs_without_huggingface_hub_and_reads_the_staging_venv(tmp_path, hub):
    """check.yml runs with the host's python, before the staging virtual environment exists: the local check
    needs no huggingface_hub and says which one the staging environment holds (install.yml decides on it)."""
    blocker = tmp_path / 'no-hf' / 'huggingface_hub'
    blocker.mkdir(parents=True)
    (blocker / '__init__.py').write_text('raise ImportError("huggingface_hub is not installed for this python")\n')
    env = {'PYTHONPATH': os.pathsep.join([str(blocker.parent), COLLECTIONS])}
    venv = tmp_path / 'venv'
    cache = str(tmp_path / 'cache')
    args = {'phase': 'plan', 'repo_id': REPO_ID, 'revision': 'main', 'cache_dir': cache, 'local_only': True,
            'report_venv': str(venv)}
    rc, res = run_module('hf_snapshot', args, env=env, tmp_path=tmp_path)
    assert rc == 0, res
    assert res['venv_huggingface_hub_version'] == '' and res['venv_problem'] == '' and res['complete'] is False
    (venv / 'bin').mkdir(parents=True)
    base = tmp_path / 'base'
    base.mkdir()
    (base / 'python3.11').write_text('#!/bin/sh\n')      # what bin/python resolves to: its name says the version
    os.chmod(str(base / 'python3.11'), 0o755)
    os.symlink(str(base / 'python3.11'), str(venv / 'bin' / 'python'))
    (venv / 'pyvenv.cfg').write_text('home = %s\nversion = 3.11.2\n' % base)
    dist = venv / 'lib' / 'python3.11' / 'site-packages' / 'huggingface_hub-2.4.0.dist-info'
    dist.mkdir(parents=True)
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: huggingface_hub\nVersion: 2.4.0\n')
    rc, res = run_module('hf_snapshot', args, env=env, tmp_path=tmp_path)
    assert rc == 0 and res['venv_huggingface_hub_version'] == '2.4.0' and res['venv_problem'] == '', res
    (venv / 'pyvenv.cfg').write_text('version = 3.10.12\n')      # made with 3.10: the base python changed since
    rc, res = run_module('hf_snapshot', args, env=env, tmp_path=tmp_path)
    assert rc == 0 and res['venv_huggingface_hub_version'] == '' and 'the base python changed' in res['venv_problem']
    # asking the hub still needs it, and says so
    rc, res = run_module('hf_snapshot', dict(args, local_only=False, endpoint=hub['url']), env=env, tmp_path=tmp_path)
    assert rc != 0 and 'huggingface_hub is not importable' in res['msg'], res


def test_local_check_creates_the_cache_dir_and_reports_the_address(tmp_path, hub):
    """check.yml's one module run: the cache directory (file module semantics), the check, the address."""
    cache = str(tmp_path / 'srv' / 'cache')
    own = {'owner': '4242', 'group': '4343', 'mode': '0750'}
    args = dict(local_only=True, create_cache_dir=own, report_address=True, _ansible_diff=True)
    rc, res = snap(tmp_path, hub, cache, check_mode=True, **args)
    assert rc == 0, res
    assert res['changed'] is True and res['cache_dir_changes'] == ['created'] and not os.path.exists(cache)
    assert res['diff']['before'] == {'path': cache, 'state': 'absent'}
    assert res['diff']['after'] == {'path': cache, 'state': 'directory', 'owner': 4242, 'group': 4343, 'mode': '0750'}
    assert res['address'] == hc.default_route_address() and res['complete'] is False
    rc, res = snap(tmp_path, hub, cache, **args)
    assert rc == 0 and res['changed'] is True and res['cache_dir_changes'] == ['created']
    st = os.stat(cache)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4242, 4343, 0o750)
    rc, res = snap(tmp_path, hub, cache, **args)
    assert rc == 0 and res['changed'] is False and res['cache_dir_changes'] == []
    assert res['diff']['before'] == res['diff']['after']
    # staged: the directory is left alone, the check finds the snapshot complete
    stage(tmp_path, hub, cache)
    rc, res = snap(tmp_path, hub, cache, **args)
    assert rc == 0 and res['changed'] is False and res['complete'] is True and res['hashed_files'] == 0
    os.chmod(cache, 0o700)
    rc, res = snap(tmp_path, hub, cache, check_mode=True, **args)
    assert rc == 0 and res['changed'] is True and res['cache_dir_changes'] == ['mode'] and res['complete'] is True
    assert (res['diff']['before']['mode'], res['diff']['after']['mode']) == ('0700', '0750')
    assert os.stat(cache).st_mode & 0o7777 == 0o700
    rc, res = snap(tmp_path, hub, cache, **args)
    assert rc == 0 and res['changed'] is True and res['cache_dir_changes'] == ['mode']
    assert os.stat(cache).st_mode & 0o7777 == 0o750
    # without the options: nothing about the directory or the address
    rc, res = snap(tmp_path, hub, cache, local_only=True)
    assert rc == 0 and res['cache_dir_changes'] == [] and 'address' not in res and 'diff' not in res


def test_cache_dir_in_the_way_or_unknown_owner_fails_before_anything_changes(tmp_path, hub):
    (tmp_path / 'srv').write_text('not a directory')
    rc, res = snap(tmp_path, hub, str(tmp_path / 'srv' / 'cache'), local_only=True, create_cache_dir={'mode': '0755'})
    assert rc == 1
    assert 'cannot create the hub cache directory: %s is not a directory' % (tmp_path / 'srv') in res['msg']
    assert 'Remedy' in res['msg']
    cache = str(tmp_path / 'cache')
    rc, res = snap(tmp_path, hub, cache, local_only=True, create_cache_dir={'owner': 'no-such-user-x'})
    assert rc == 1 and 'no-such-user-x' in res['msg'] and 'Remedy' in res['msg'] and not os.path.exists(cache)
    rc, res = snap(tmp_path, hub, cache, local_only=True, create_cache_dir={'mode': 'rwx'})
    assert rc == 1 and "'rwx' is not an octal string" in res['msg'] and not os.path.exists(cache)


@pytest.fixture(scope='module')
def gated_hub(tmp_path_factory):
    """The hub double with a token: every request without it is refused."""
    fake_hub = load('fake_hub_g', 'fake_hub.py')
    make_model = load('make_model_g', 'make-model.py')
    root = str(tmp_path_factory.mktemp('gatedroot'))
    make_model.main(['--root', root, '--shards', '2', '--shard-kib', '256'])
    srv = fake_hub.FakeHub(('127.0.0.1', 0), root, token='hf_gated_secret')
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {'url': 'http://127.0.0.1:%d' % srv.server_address[1], 'srv': srv}
    srv.shutdown()
    srv.server_close()


def test_the_background_download_reads_the_token_from_a_root_only_file(tmp_path, gated_hub):
    """The token never rides in the background task's arguments (its payload is a file in the SSH user's home):
    the plan writes it root-only, never through a link, and the download reads it and removes it."""
    cache = str(tmp_path / 'cache')
    token_file = tmp_path / 'run' / 'token'
    victim = tmp_path / 'victim'
    victim.write_text('keep me')
    token_file.parent.mkdir(mode=0o755)
    os.symlink(str(victim), str(token_file))  # planted: the write must replace the link, not follow it
    rc, plan = snap(tmp_path, gated_hub, cache, token='hf_gated_secret', token_file=str(token_file))
    assert rc == 0, plan
    assert plan['token_file'] == str(token_file) and plan['download']
    assert victim.read_text() == 'keep me'
    assert not os.path.islink(token_file)
    assert oct(os.stat(token_file).st_mode & 0o777) == '0o600'
    assert oct(os.stat(token_file.parent).st_mode & 0o777) == '0o700'
    assert token_file.read_text() == 'hf_gated_secret'
    rc, res = download(tmp_path, gated_hub, plan, token_file=str(token_file))
    assert rc == 0, res
    assert 'hf_gated_secret' not in json.dumps(res)
    assert not os.path.exists(token_file)
    # without the file (and no token) the gated hub refuses: the token really came from the file
    rc, plan2 = snap(tmp_path, gated_hub, str(tmp_path / 'cache2'), token='hf_gated_secret')
    assert rc == 0 and 'token_file' not in plan2
    rc, res2 = download(tmp_path, gated_hub, plan2)
    assert rc != 0


def test_the_role_s_background_download_gets_no_token():
    import yaml
    with open(os.path.join(REPO_ROOT, 'roles', 'hf_cache', 'tasks', 'download_start.yml')) as f:
        task = yaml.safe_load(f)[0]
    assert task['async'] and task['poll'] == 0
    args = task['inkling.fleet.hf_download']
    assert 'token' not in args and 'token_file' in args
