# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Hub cache layout, verification, manifest and free-space decisions (field failures F10, F11)."""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from inkling_test_helpers import COLLECTIONS, ON_CI, needs_program

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

COMMIT = '0123abcd' * 5
REPO = 'example-org/big-moe'


def make_tree(tmp_path, files, lfs=('.safetensors',), skip_blobs=(), skip_links=()):
    """Write a hub cache tree the way huggingface_hub does; return (cache_dir, repo_dir, entries)."""
    cache = str(tmp_path / 'hub')
    rdir = hc.repo_dir(cache, REPO)
    entries = []
    for path, data in sorted(files.items()):
        is_lfs = path.endswith(tuple(lfs))
        etag = hashlib.sha256(data).hexdigest() if is_lfs else hc.git_blob_sha1_bytes(data)
        e = hc.FileEntry(path, len(data), etag, is_lfs)
        entries.append(e)
        os.makedirs(os.path.join(rdir, 'blobs'), exist_ok=True)
        if path not in skip_blobs:
            with open(hc.blob_path(rdir, etag), 'wb') as f:
                f.write(data)
        if path not in skip_links:
            hc.fix_link(rdir, COMMIT, e)
    os.makedirs(os.path.join(rdir, 'refs'), exist_ok=True)
    with open(os.path.join(rdir, 'refs', 'main'), 'w') as f:
        f.write(COMMIT)
    return cache, rdir, entries


def model_files(shards=3):
    files = {'config.json': b'{"model_type": "inkling"}\n'}
    weight_map = {}
    for i in range(shards):
        name = 'model-%05d-of-%05d.safetensors' % (i + 1, shards)
        files[name] = bytes([i + 1]) * (1000 + i)
        weight_map['layer.%d.weight' % i] = name
    files[hc.SAFETENSORS_INDEX] = json.dumps({'weight_map': weight_map}).encode()
    return files


def kinds(problems):
    return sorted((p.path, p.kind) for p in problems)


def test_git_blob_sha1_matches_git():
    # `printf 'hello\n' | git hash-object --stdin`
    assert hc.git_blob_sha1_bytes(b'hello\n') == 'ce013625030ba8dba906f756967f9e9ca394464a'


def test_hash_file_uses_the_entry_algorithm(tmp_path):
    p = tmp_path / 'f'
    p.write_bytes(b'hello\n')
    small = hc.FileEntry('a.txt', 6, 'ce013625030ba8dba906f756967f9e9ca394464a', False)
    big = hc.FileEntry('a.bin', 6, hashlib.sha256(b'hello\n').hexdigest(), True)
    assert hc.hash_file(str(p), small) == small.etag
    assert hc.hash_file(str(p), big) == big.etag


def test_repo_folder_and_links_are_relative():
    assert hc.repo_folder_name('thinkingmachines/Inkling-NVFP4') == 'models--thinkingmachines--Inkling-NVFP4'
    with pytest.raises(hc.HfCacheError):
        hc.repo_folder_name('no-slash')
    rdir = '/c/models--a--b'
    assert hc.link_target(rdir, COMMIT, 'config.json', 'e' * 40) == '../../blobs/' + 'e' * 40
    assert hc.link_target(rdir, COMMIT, 'sub/dir/x.json', 'e' * 40) == '../../../../blobs/' + 'e' * 40


@pytest.mark.parametrize('bad', ['../etc/passwd', '/abs', 'a/../../b', 'a//b', ''])
def test_unsafe_repo_paths_are_refused(bad):
    with pytest.raises(hc.HfCacheError):
        hc.FileEntry(bad, 1, 'a' * 40, False)


def test_clean_tree_has_no_problems_and_index_resolves(tmp_path):
    _cache, rdir, entries = make_tree(tmp_path, model_files())
    res = hc.inspect(rdir, COMMIT, entries, want_hash='all')
    assert res['problems'] == []
    assert len(res['hashed']) == len(entries)
    assert hc.check_index(rdir, COMMIT, entries) == []


def test_f10_copied_snapshot_has_dangling_links(tmp_path):
    """F10: links copied without their blobs (rsync -a of snapshots/ only)."""
    files = model_files(shards=163)
    shard1 = 'model-00001-of-00163.safetensors'
    _cache, rdir, entries = make_tree(tmp_path, files, skip_blobs=(hc.SAFETENSORS_INDEX, shard1))
    res = hc.inspect(rdir, COMMIT, entries)
    assert kinds(res['problems']) == [(shard1, 'blob_missing'), (hc.SAFETENSORS_INDEX, 'blob_missing')]
    assert [e.path for e in hc.refetch_entries(entries, res['problems'])] == [shard1, hc.SAFETENSORS_INDEX]
    # the link itself dangles, and the index cannot be read to confirm the shard count
    assert hc.check_link(rdir, COMMIT, [e for e in entries if e.path == shard1][0]).kind == 'link_dangling'
    idx = hc.check_index(rdir, COMMIT, entries)
    assert len(idx) == 1 and 'cannot confirm the shard count' in idx[0].detail


def test_f10_index_names_a_shard_that_does_not_resolve(tmp_path):
    files = model_files(shards=3)
    _cache, rdir, entries = make_tree(tmp_path, files)
    os.unlink(hc.link_path(rdir, COMMIT, 'model-00002-of-00003.safetensors'))
    idx = hc.check_index(rdir, COMMIT, entries)
    assert [p.path for p in idx] == ['model-00002-of-00003.safetensors']


def test_f10_index_names_an_empty_shard(tmp_path):
    """A shard the index names that is 0 bytes (and says so to the hub) is refused all the same."""
    files = model_files(shards=3)
    files['model-00003-of-00003.safetensors'] = b''
    _cache, rdir, entries = make_tree(tmp_path, files)
    assert hc.inspect(rdir, COMMIT, entries, want_hash='all')['problems'] == []  # sizes and hashes agree
    idx = hc.check_index(rdir, COMMIT, entries)
    assert [(p.path, p.kind, p.detail) for p in idx] == [
        ('model-00003-of-00003.safetensors', 'index',
         'shard named in %s does not resolve to a non-empty file' % hc.SAFETENSORS_INDEX)]


def test_f10_index_names_a_shard_outside_the_staged_set(tmp_path):
    files = model_files(shards=2)
    files[hc.SAFETENSORS_INDEX] = json.dumps({'weight_map': {
        'a': 'model-00001-of-00002.safetensors', 'b': 'model-00002-of-00002.safetensors',
        'c': 'model-00009-of-00009.safetensors'}}).encode()
    _cache, rdir, entries = make_tree(tmp_path, files)
    assert [(p.path, p.detail) for p in hc.check_index(rdir, COMMIT, entries)] == [
        ('model-00009-of-00009.safetensors', 'named in %s but not part of the staged file set' % hc.SAFETENSORS_INDEX)]


def test_f10_dereferenced_copy_and_absolute_links_are_found_and_fixed(tmp_path):
    _cache, rdir, entries = make_tree(tmp_path, model_files())
    cfg = [e for e in entries if e.path == 'config.json'][0]
    idx = [e for e in entries if e.path == hc.SAFETENSORS_INDEX][0]
    # cp -L: a regular file where the link belongs
    lp = hc.link_path(rdir, COMMIT, cfg.path)
    os.unlink(lp)
    with open(lp, 'wb') as f:
        f.write(b'{"model_type": "inkling"}\n')
    # absolute link into another tree
    ip = hc.link_path(rdir, COMMIT, idx.path)
    os.unlink(ip)
    os.symlink(hc.blob_path(rdir, idx.etag), ip)
    res = hc.inspect(rdir, COMMIT, entries)
    assert kinds(res['problems']) == [('config.json', 'link_not_symlink'), (hc.SAFETENSORS_INDEX, 'link_wrong_target')]
    assert hc.refetch_entries(entries, res['problems']) == []
    assert hc.fix_link(rdir, COMMIT, cfg) and hc.fix_link(rdir, COMMIT, idx)
    assert hc.inspect(rdir, COMMIT, entries)['problems'] == []
    assert hc.fix_link(rdir, COMMIT, cfg) is False


def test_f11_short_blob_and_incomplete_leftover(tmp_path):
    """F11: an interrupted download leaves a short blob and blobs/<sha>.incomplete."""
    files = model_files()
    _cache, rdir, entries = make_tree(tmp_path, files)
    shard = [e for e in entries if e.path == 'model-00002-of-00003.safetensors'][0]
    with open(hc.blob_path(rdir, shard.etag), 'r+b') as f:
        f.truncate(10)
    with open(hc.incomplete_path(rdir, 'b' * 64), 'wb') as f:
        f.write(b'x' * 100)
    res = hc.inspect(rdir, COMMIT, entries)
    assert kinds(res['problems']) == [(shard.path, 'blob_size')]
    assert res['incomplete'] == ['b' * 64 + '.incomplete']


def test_f11_free_space_refused_before_download(tmp_path, monkeypatch):
    monkeypatch.setattr(hc, 'free_bytes', lambda path: 1099511627776)
    ok, msg, details = hc.space_check(str(tmp_path), 1950000000000, 5, 'gpu-node-07')
    assert not ok
    assert details['needed_with_margin_bytes'] == 2047500000000
    assert msg.startswith('gpu-node-07: not enough free space')
    assert 'need 1.8 TiB + 5% margin = 1.9 TiB, 1.0 TiB free' in msg
    ok, msg, dummy = hc.space_check(str(tmp_path), 10 ** 9, 5, 'gpu-node-07')
    assert ok and msg is None


def test_bytes_needed_subtracts_partial_downloads(tmp_path):
    _cache, rdir, entries = make_tree(tmp_path, model_files(), skip_blobs=('model-00001-of-00003.safetensors',))
    e = [x for x in entries if x.path == 'model-00001-of-00003.safetensors'][0]
    assert hc.bytes_needed(rdir, [e]) == 1000
    with open(hc.incomplete_path(rdir, e.etag), 'wb') as f:
        f.write(b'\1' * 600)
    assert hc.bytes_needed(rdir, [e]) == 400


def test_corrupt_blob_same_size_is_found_by_hash_only(tmp_path):
    _cache, rdir, entries = make_tree(tmp_path, model_files())
    shard = [e for e in entries if e.path.endswith('00003.safetensors')][0]
    bp = hc.blob_path(rdir, shard.etag)
    with open(bp, 'r+b') as f:
        f.write(b'\0\0\0')
    assert hc.inspect(rdir, COMMIT, entries, want_hash='none')['problems'] == []
    res = hc.inspect(rdir, COMMIT, entries, want_hash='all')
    assert kinds(res['problems']) == [(shard.path, 'blob_hash')]
    assert hc.remove_bad_blob(rdir, shard) and not os.path.exists(bp)


def test_quick_verify_reads_no_content_unless_stat_changed(tmp_path, monkeypatch):
    _cache, rdir, entries = make_tree(tmp_path, model_files())
    stats = hc.inspect(rdir, COMMIT, entries, want_hash='all')['stats']
    man = hc.build_manifest(REPO, COMMIT, 'main', entries, stats, None, None)
    hc.write_json_atomic(hc.manifest_path(rdir, COMMIT), man)
    assert hc.load_manifest(rdir, COMMIT) is None      # no marker yet: not complete
    hc.write_marker(rdir, COMMIT)
    loaded = hc.load_manifest(rdir, COMMIT)
    assert loaded['total_bytes'] == sum(e.size for e in entries)

    calls = []
    real = hc.hash_file
    monkeypatch.setattr(hc, 'hash_file', lambda p, e, chunk=hc.HASH_CHUNK: calls.append(p) or real(p, e))
    res = hc.quick_verify(rdir, COMMIT, loaded)
    assert res['problems'] == [] and calls == []
    # rewrite one blob in place: its mtime changes, so it (and only it) is hashed, and found corrupt
    shard = [e for e in entries if e.path.endswith('00001-of-00003.safetensors')][0]
    bp = hc.blob_path(rdir, shard.etag)
    with open(bp, 'r+b') as f:
        f.write(b'\0')
    os.utime(bp, ns=(1, 1))
    res = hc.quick_verify(rdir, COMMIT, loaded)
    assert calls == [bp]
    assert kinds(res['problems']) == [(shard.path, 'blob_hash')]


@pytest.mark.parametrize('key,value', [('version', hc.MANIFEST_VERSION + 1), ('version', None),
                                       ('revision', 'f' * 40), ('revision', None)])
def test_manifest_of_another_version_or_revision_is_not_trusted(tmp_path, key, value):
    """A manifest written by another format version, or for another revision, is not used to skip hashing."""
    _cache, rdir, entries = make_tree(tmp_path, model_files())
    stats = hc.inspect(rdir, COMMIT, entries, want_hash='all')['stats']
    man = hc.build_manifest(REPO, COMMIT, 'main', entries, stats, None, None)
    hc.write_json_atomic(hc.manifest_path(rdir, COMMIT), man)
    hc.write_marker(rdir, COMMIT)
    assert hc.load_manifest(rdir, COMMIT) == man
    man[key] = value
    hc.write_json_atomic(hc.manifest_path(rdir, COMMIT), man)
    assert hc.load_manifest(rdir, COMMIT) is None


def test_entries_from_siblings_and_patterns():
    sibs = [
        {'rfilename': 'config.json', 'size': 10, 'blobId': 'a' * 40},
        {'rfilename': 'model-00001.safetensors', 'size': 5, 'blobId': 'c' * 40,
         'lfs': {'sha256': 'b' * 64, 'size': 5000, 'pointerSize': 130}},
        {'rfilename': 'original/consolidated.pth', 'size': 7, 'blobId': 'd' * 40},
    ]
    entries = hc.entries_from_siblings(sibs)
    by = dict((e.path, e) for e in entries)
    assert by['model-00001.safetensors'].etag == 'b' * 64 and by['model-00001.safetensors'].size == 5000
    assert by['config.json'].etag == 'a' * 40 and not by['config.json'].lfs
    assert [e.path for e in hc.filter_entries(entries, ignore_patterns=['original/'])] == [
        'config.json', 'model-00001.safetensors']
    assert [e.path for e in hc.filter_entries(entries, allow_patterns=['*.json'])] == ['config.json']
    with pytest.raises(hc.HfCacheError, match='no size'):
        hc.entries_from_siblings([{'rfilename': 'x', 'size': None, 'blobId': 'a' * 40}])


def test_refs_are_recorded_once(tmp_path):
    rdir = str(tmp_path / 'r')
    assert hc.read_ref(rdir, 'main') is None
    assert hc.write_ref(rdir, 'main', COMMIT) is True
    assert hc.write_ref(rdir, 'main', COMMIT) is False
    assert hc.read_ref(rdir, 'main') == COMMIT
    assert hc.read_ref(rdir, COMMIT) == COMMIT
    assert hc.write_ref(rdir, COMMIT, COMMIT) is False


def test_ownership_and_modes(tmp_path):
    _cache, rdir, entries = make_tree(tmp_path, model_files())
    assert hc.dir_mode_for(0o644) == 0o755 and hc.dir_mode_for(0o640) == 0o750 and hc.dir_mode_for(0o600) == 0o700
    assert hc.apply_ownership(rdir, COMMIT, None, None, 0o640) > 0
    bp = hc.blob_path(rdir, entries[0].etag)
    assert os.stat(bp).st_mode & 0o777 == 0o640
    assert os.stat(os.path.join(rdir, 'blobs')).st_mode & 0o777 == 0o750
    assert hc.apply_ownership(rdir, COMMIT, None, None, 0o640) == 0


def test_progress_message():
    msg = hc.progress_message({'bytes_total': 4 * 2 ** 30, 'bytes_done': 2 ** 30, 'rate_bps': 100 * 2 ** 20,
                               'eta_s': 3725, 'files_done': 2, 'files_total': 9, 'retries': 1, 'state': 'running'})
    assert msg == '1.0 GiB of 4.0 GiB (25.0%), 100.0 MiB/s, 1:02:05 left, file 2/9, 1 retries'


def test_progress_message_of_a_peer_copy():
    msg = hc.progress_message({'state': 'running', 'source': 'gpu-01', 'bytes_total': 1024 ** 3,
                               'bytes_done': 512 * 1024 ** 2, 'rate_bps': 1024 ** 2, 'eta_s': 512,
                               'files_done': 1, 'files_total': 4})
    assert msg == 'from gpu-01: 512.0 MiB of 1.0 GiB (50.0%), 1.0 MiB/s, 0:08:32 left, file 1/4'
    assert hc.progress_message({'state': 'waiting', 'source': 'gpu-01', 'started': 0}).startswith(
        'waiting for gpu-01 to hold a verified snapshot (')
    assert hc.progress_message({'state': 'failed', 'source': 'gpu-01', 'bytes_total': 0,
                                'error': 'gpu-02: no peer could serve'}) == '[failed]: gpu-02: no peer could serve'


def mode_of(path):
    return os.stat(path).st_mode & 0o7777


def owner_mode(path):
    st = os.stat(path)
    return st.st_uid, st.st_gid, st.st_mode & 0o7777


def test_ensure_directory_creates_parents_with_owner_and_mode(tmp_path):
    path = str(tmp_path / 'var' / 'lib' / 'hub')
    top = owner_mode(str(tmp_path))
    # check mode: nothing is created, the answer says what would be
    changes, before, after = hc.ensure_directory(path, 4242, 4343, 0o750, check_mode=True)
    assert changes == ['created'] and not os.path.exists(str(tmp_path / 'var'))
    assert before == {'path': path, 'state': 'absent'}
    assert after == {'path': path, 'state': 'directory', 'owner': 4242, 'group': 4343, 'mode': '0750'}
    changes, before, after = hc.ensure_directory(path, 4242, 4343, 0o750)
    assert changes == ['created'] and before['state'] == 'absent'
    assert after == {'path': path, 'state': 'directory', 'owner': 4242, 'group': 4343, 'mode': '0750'}
    for p in (str(tmp_path / 'var'), str(tmp_path / 'var' / 'lib'), path):  # as the file module: every new one
        st = os.stat(p)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4242, 4343, 0o750), p
    assert owner_mode(str(tmp_path)) == top  # the existing parent is left as it was
    assert hc.ensure_directory(path, 4242, 4343, 0o750) == ([], after, after)


def test_ensure_directory_fixes_owner_group_and_mode_alone(tmp_path):
    path = str(tmp_path / 'hub')
    os.mkdir(path)
    os.chmod(path, 0o700)
    st = os.stat(path)
    # None keeps what is there
    assert hc.ensure_directory(path, None, None, None)[0] == []
    changes, before, after = hc.ensure_directory(path, st.st_uid, 4343, 0o755, check_mode=True)
    assert changes == ['group', 'mode'] and mode_of(path) == 0o700 and os.stat(path).st_gid == st.st_gid
    assert before['mode'] == '0700' and after['mode'] == '0755' and after['group'] == 4343
    assert after['owner'] == before['owner'] == st.st_uid
    changes, before, after = hc.ensure_directory(path, 4242, 4343, 0o755)
    assert changes == ['owner', 'group', 'mode']
    assert (os.stat(path).st_uid, os.stat(path).st_gid, mode_of(path)) == (4242, 4343, 0o755)
    assert after == {'path': path, 'state': 'directory', 'owner': 4242, 'group': 4343, 'mode': '0755'}
    assert hc.ensure_directory(path, 4242, 4343, 0o755)[0] == []
    os.chmod(path, 0o775)
    assert hc.ensure_directory(path, 4242, 4343, 0o755)[0] == ['mode'] and mode_of(path) == 0o755


def test_ensure_directory_follows_a_link_and_refuses_a_file(tmp_path):
    real = tmp_path / 'real'
    real.mkdir()
    os.chmod(str(real), 0o700)
    os.symlink(str(real), str(tmp_path / 'link'))
    assert hc.ensure_directory(str(tmp_path / 'link'), None, None, 0o755)[0] == ['mode']
    assert mode_of(str(real)) == 0o755 and os.path.islink(str(tmp_path / 'link'))
    (tmp_path / 'file').write_text('x')
    for path in (str(tmp_path / 'file'), str(tmp_path / 'file' / 'hub')):
        with pytest.raises(hc.HfCacheError, match='file is not a directory'):
            hc.ensure_directory(path, None, None, 0o755)
    assert (tmp_path / 'file').read_text() == 'x'


class FakeSocket(object):
    def __init__(self, fail=None, address='10.1.2.3'):
        self.fail, self.address, self.connected, self.closed = fail, address, None, False

    def connect(self, where):
        if self.fail:
            raise self.fail
        self.connected = where

    def getsockname(self):
        return (self.address, 40000)

    def close(self):
        self.closed = True


def test_default_route_address_is_the_route_source_address():
    made = []

    def factory(family, kind):
        made.append((family, kind, FakeSocket()))
        return made[-1][2]

    assert hc.default_route_address(socket_factory=factory) == '10.1.2.3'
    family, kind, sock = made[0]
    assert (family, kind) == (socket.AF_INET, socket.SOCK_DGRAM)  # IPv4, UDP: connect sends nothing
    assert sock.connected == ('8.8.8.8', 53) and sock.closed


@pytest.mark.parametrize('fake', [FakeSocket(fail=OSError(101, 'Network is unreachable')), FakeSocket(address='0.0.0.0')])
def test_default_route_address_without_a_route_is_empty(fake):
    assert hc.default_route_address(socket_factory=lambda *_a: fake) == ''
    assert fake.closed


def route_get_src():
    """What Ansible's ansible_default_ipv4.address reads: 'src' of `ip -4 route get 8.8.8.8`."""
    proc = subprocess.run(['ip', '-4', 'route', 'get', ROUTE_PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    words = proc.stdout.split()
    return words[words.index('src') + 1] if proc.returncode == 0 and 'src' in words else ''


ROUTE_PROBE = '8.8.8.8'


@needs_program('ip')
def test_default_route_address_matches_ip_route_get():
    assert hc.default_route_address() == route_get_src()


@needs_program('unshare')
def test_default_route_address_in_a_namespace_without_routes_is_empty():
    # a fresh network namespace has only a loopback that is down: no route at all
    probe = subprocess.run(['unshare', '-n', 'true'], check=False)
    if probe.returncode != 0 and not ON_CI:
        pytest.skip('unshare -n needs root')
    code = ('import sys; sys.path.insert(0, %r); '
            'from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc; '
            'print(repr(hc.default_route_address()))' % COLLECTIONS)
    proc = subprocess.run(['unshare', '-n', sys.executable, '-c', code], stdout=subprocess.PIPE,
                          universal_newlines=True, check=True)
    assert proc.stdout.strip() == "''"


def fake_python(where, name):
    """An executable named NAME in WHERE (a base python as the venv's bin/python resolves to it)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / name
    path.write_text('#!/bin/sh\n')
    os.chmod(str(path), 0o755)
    return path


def make_venv(tmp_path, cfg='home = /usr/bin\nversion = 3.11.2\n', pythons=('python3.11',), dists=(),
              python='python3.11'):
    """A virtual environment's layout: bin/python (a link to an executable named PYTHON, None: no link),
    pyvenv.cfg, lib/PY/site-packages with the .dist-info folders DISTS ((folder, METADATA text or None) pairs,
    in the first site-packages)."""
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    if python:
        os.symlink(str(fake_python(tmp_path / 'base', python)), str(venv / 'bin' / 'python'))
    if cfg is not None:
        (venv / 'pyvenv.cfg').write_text(cfg)
    for py in pythons:
        (venv / 'lib' / py / 'site-packages').mkdir(parents=True)
    for folder, meta in dists:
        d = venv / 'lib' / pythons[0] / 'site-packages' / folder
        d.mkdir()
        if meta is not None:
            (d / 'METADATA').write_text(meta)
    return str(venv)


HF = [('huggingface_hub-2.4.0.dist-info', 'Name: huggingface_hub\nVersion: 2.4.0\n')]


def test_venv_distribution_reads_the_installed_metadata(tmp_path):
    venv = make_venv(tmp_path, dists=HF + [('requests-2.32.3.dist-info', 'Name: requests\nVersion: 2.32.3\n')])
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}
    assert hc.venv_distribution(venv, 'huggingface-hub')['version'] == '2.4.0'      # either spelling of the name
    assert hc.venv_distribution(venv, 'requests')['version'] == '2.32.3'
    # not installed (or no venv yet): install it, nothing is wrong
    assert hc.venv_distribution(venv, 'torch') == {'version': '', 'problem': ''}
    assert hc.venv_distribution(str(tmp_path / 'absent'), 'huggingface_hub') == {'version': '', 'problem': ''}
    # virtualenv's pyvenv.cfg line; RHEL 8's platform-python
    venv = make_venv(tmp_path / 'virtualenv', cfg='virtualenv = 20.29.1\nversion_info = 3.11.2.final.0\n', dists=HF)
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}
    venv = make_venv(tmp_path / 'rhel', python='platform-python3.11', dists=HF)
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}


def test_a_venv_whose_python_is_gone_or_another_version_is_a_problem(tmp_path):
    # its python is a link to a removed file
    venv = make_venv(tmp_path, dists=HF, python=None)
    os.symlink(str(tmp_path / 'removed-python'), os.path.join(venv, 'bin', 'python'))
    res = hc.venv_distribution(venv, 'huggingface_hub')
    assert res['version'] == '' and 'which is gone' in res['problem']
    # a release upgrade: the link (bin/python -> /usr/bin/python3) resolves to another python than the venv was
    # made with; what its site-packages holds cannot be imported by it
    venv = make_venv(tmp_path / 'upgraded', python='python3.13', dists=HF)
    res = hc.venv_distribution(venv, 'huggingface_hub')
    assert res['version'] == '' and 'is Python 3.13, but it was made with Python 3.11' in res['problem'], res
    # a copied python (its name carries no version): the base python in `home` must still exist
    copied = tmp_path / 'copied'
    base = copied / 'base'
    venv = make_venv(copied, cfg='home = %s\nversion = 3.11.2\n' % base, dists=HF, python=None)
    shutil.copy(str(fake_python(copied / 'elsewhere', 'python')), os.path.join(venv, 'bin', 'python'))
    res = hc.venv_distribution(venv, 'huggingface_hub')
    assert res['version'] == '' and 'which %s no longer holds' % base in res['problem'], res
    fake_python(base, 'python3.11')
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}


def test_venv_site_packages_is_the_one_of_its_python(tmp_path):
    # a venv upgraded in place keeps the old site-packages: only the one of its python counts
    venv = make_venv(tmp_path, cfg='version = 3.13.5\n', python='python3.13', pythons=('python3.11', 'python3.13'))
    assert hc.venv_site_packages(venv) == (os.path.join(venv, 'lib', 'python3.13', 'site-packages'), '')
    # none for its python: nothing it could import
    venv = make_venv(tmp_path / 'b', pythons=('python3.13',), dists=HF)
    assert hc.venv_site_packages(venv) == (None, 'it has no lib/python3.11/site-packages for its Python 3.11')
    assert hc.venv_distribution(venv, 'huggingface_hub')['version'] == ''
    # without pyvenv.cfg: the version of the python it resolves to; neither: cannot tell (pip decides)
    venv = make_venv(tmp_path / 'c', cfg=None, dists=HF)
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}
    venv = make_venv(tmp_path / 'd', cfg=None, python='python', dists=HF)
    assert hc.venv_site_packages(venv) == (None, '')


def test_two_installations_are_a_problem_a_leftover_folder_is_not(tmp_path):
    # two installations of one distribution (an interrupted upgrade): pip would leave them, so say so
    venv = make_venv(tmp_path, dists=HF + [('huggingface_hub-2.3.0.dist-info', 'Version: 2.3.0\n')])
    res = hc.venv_distribution(venv, 'huggingface_hub')
    assert res['version'] == '' and '2 installations of huggingface_hub (2.3.0, 2.4.0)' in res['problem'], res
    # a leftover folder without METADATA is no installation; the folder name gives the version otherwise
    venv = make_venv(tmp_path / 'b', dists=[('huggingface_hub-2.3.0.dist-info', None),
                                            ('huggingface_hub-2.4.0.dist-info', 'Name: huggingface_hub\n')])
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}
    # METADATA that is not UTF-8 is read, not a failure of the whole check
    venv = make_venv(tmp_path / 'c', dists=[('huggingface_hub-2.4.0.dist-info', None)])
    with open(os.path.join(venv, 'lib', 'python3.11', 'site-packages', 'huggingface_hub-2.4.0.dist-info',
                           'METADATA'), 'wb') as f:
        f.write(b'Name: huggingface_hub\nVersion: 2.4.0\nAuthor: \xff\xfe\n')
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}


def test_a_free_threaded_python_reads_its_own_site_packages(tmp_path):
    # a free-threaded build keeps its packages in lib/python3.Xt
    venv = make_venv(tmp_path, cfg='home = /usr/bin\nversion = 3.13.0\n', python='python3.13t',
                     pythons=('python3.13t', 'python3.13'), dists=HF)
    assert hc.venv_site_packages(venv) == (os.path.join(venv, 'lib', 'python3.13t', 'site-packages'), '')
    assert hc.venv_distribution(venv, 'huggingface_hub') == {'version': '2.4.0', 'problem': ''}
