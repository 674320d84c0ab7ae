# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The lab's hub test double (lab/hub/fake_hub.py) driven by the real huggingface_hub client."""

import hashlib
import importlib.util
import json
import os
import threading
import urllib.request

import pytest

import huggingface_hub
from huggingface_hub import errors as hf_errors

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
REPO_ID = 'thinkingmachines/Inkling-NVFP4'


def load(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO_ROOT, 'lab', 'hub', filename))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fake_hub = load('fake_hub', 'fake_hub.py')
make_model = load('make_model', 'make-model.py')


@pytest.fixture(scope='module')
def hub(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('hubroot'))
    assert make_model.main(['--root', root, '--shards', '3', '--shard-kib', '1024']) == 0
    srv = fake_hub.FakeHub(('127.0.0.1', 0), root)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    with open(os.path.join(root, 'revisions.json')) as f:
        revs = json.load(f)[REPO_ID]
    yield {'url': 'http://127.0.0.1:%d' % srv.server_address[1], 'srv': srv, 'root': root, 'revs': revs}
    srv.shutdown()
    srv.server_close()


def api(hub):
    return huggingface_hub.HfApi(endpoint=hub['url'], token=False)


def control(hub, method, path, body=None):
    req = urllib.request.Request(hub['url'] + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


def test_generator_is_deterministic_and_content_addressed(tmp_path, hub):
    root2 = str(tmp_path / 'again')
    make_model.main(['--root', root2, '--shards', '3', '--shard-kib', '1024'])
    with open(os.path.join(root2, 'revisions.json')) as f:
        assert json.load(f)[REPO_ID]['commit'] == hub['revs']['commit']
    root3 = str(tmp_path / 'other')
    make_model.main(['--root', root3, '--shards', '2', '--shard-kib', '1024'])
    with open(os.path.join(root3, 'revisions.json')) as f:
        assert json.load(f)[REPO_ID]['commit'] != hub['revs']['commit']


def test_snapshot_download_builds_a_valid_cache(tmp_path, hub):
    cache = str(tmp_path / 'cache')
    path = huggingface_hub.snapshot_download(REPO_ID, revision='main', cache_dir=cache, endpoint=hub['url'],
                                             token=False)
    commit = hub['revs']['commit']
    assert path.endswith('snapshots/' + commit)
    info = api(hub).model_info(REPO_ID, revision='v1.0', files_metadata=True)
    assert info.sha == commit
    names = sorted(os.listdir(path))
    assert names == sorted(s.rfilename for s in info.siblings)
    assert 'model.safetensors.index.json' in names and len([n for n in names if n.endswith('.safetensors')]) == 3
    for sib in info.siblings:
        link = os.path.join(path, sib.rfilename)
        assert os.path.islink(link) and not os.path.isabs(os.readlink(link))
        with open(link, 'rb') as f:
            data = f.read()
        assert len(data) == sib.size
        if sib.lfs:
            assert hashlib.sha256(data).hexdigest() == sib.lfs.sha256 == os.path.basename(os.readlink(link))
        else:
            assert hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest() == sib.blob_id
    with open(os.path.join(cache, 'models--thinkingmachines--Inkling-NVFP4', 'refs', 'main')) as f:
        assert f.read().strip() == commit
    # a valid safetensors header
    shard = os.path.join(path, 'model-00001-of-00003.safetensors')
    with open(shard, 'rb') as f:
        n = int.from_bytes(f.read(8), 'little')
        header = json.loads(f.read(n))
    assert any(k.endswith('.weight') for k in header)


def test_tree_listing(hub):
    files = list(api(hub).list_repo_tree(REPO_ID, revision=hub['revs']['commit'], recursive=True))
    sizes = dict((f.path, f.size) for f in files)
    assert sizes['config.json'] > 0
    lfs = [f for f in files if getattr(f, 'lfs', None)]
    assert len(lfs) == 3 and all(len(f.lfs.sha256) == 64 for f in lfs)


def test_error_types(tmp_path, hub):
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        api(hub).model_info('nobody/nothing')
    with pytest.raises(hf_errors.RevisionNotFoundError):
        api(hub).model_info(REPO_ID, revision='no-such-branch')
    with pytest.raises(hf_errors.EntryNotFoundError):
        huggingface_hub.hf_hub_download(REPO_ID, 'missing.json', cache_dir=str(tmp_path), endpoint=hub['url'],
                                        token=False)


def test_head_headers_and_range(hub):
    commit = hub['revs']['commit']
    url = '%s/%s/resolve/main/model-00002-of-00003.safetensors' % (hub['url'], REPO_ID)
    with urllib.request.urlopen(urllib.request.Request(url, method='HEAD')) as resp:
        assert resp.headers['X-Repo-Commit'] == commit
        assert resp.headers['Accept-Ranges'] == 'bytes'
        size = int(resp.headers['Content-Length'])
        etag = resp.headers['ETag'].strip('"')
    with urllib.request.urlopen(urllib.request.Request(url, headers={'Range': 'bytes=100-'})) as resp:
        assert resp.status == 206
        assert resp.headers['Content-Range'] == 'bytes 100-%d/%d' % (size - 1, size)
        tail = resp.read()
    with urllib.request.urlopen(url) as resp:
        whole = resp.read()
    assert whole[100:] == tail and hashlib.sha256(whole).hexdigest() == etag


def test_dropped_connection_is_resumed_by_the_client(tmp_path, hub):
    control(hub, 'POST', '/_fake/reset')
    name = 'model-00003-of-00003.safetensors'
    control(hub, 'POST', '/_fake/faults', {'path': name, 'drop_at': 300000, 'times': 1})
    path = huggingface_hub.hf_hub_download(REPO_ID, name, revision='main', cache_dir=str(tmp_path),
                                           endpoint=hub['url'], token=False)
    stats = control(hub, 'GET', '/_fake/stats')
    size = os.path.getsize(path)
    assert stats['by_path']['%s/%s' % (REPO_ID, name)] > size      # served twice, in part
    with open(path, 'rb') as f:
        info = api(hub).model_info(REPO_ID, files_metadata=True)
        want = [s for s in info.siblings if s.rfilename == name][0].lfs.sha256
        assert hashlib.sha256(f.read()).hexdigest() == want


def test_token_is_required_when_configured(tmp_path, hub):
    hub['srv'].token = 'sekrit'
    try:
        with pytest.raises(hf_errors.RepositoryNotFoundError):
            api(hub).model_info(REPO_ID)
        info = huggingface_hub.HfApi(endpoint=hub['url'], token='sekrit').model_info(REPO_ID)
        assert info.sha == hub['revs']['commit']
    finally:
        hub['srv'].token = None
