# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The compile cache seed server (module_utils/cache_seed_server.py) over real sockets: it serves only the listed
files of one set, only to the fleet's addresses and only with the run's token, and never follows a link the
container planted (issue 36, finding 2)."""

import http.client
import json
import os
import socket
import stat
import threading

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import cache_seed_server as css
from inkling_test_helpers import run_module

TOKEN = 'per-run-token-made-on-the-controller'


def start(cfg):
    server = css.make_server(cfg)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def seed(tmp_path):
    root = tmp_path / 'set'
    (root / 'vllm' / 'a').mkdir(parents=True)
    (root / 'vllm' / 'a' / 'rank0').write_bytes(b'kernel' * 10)
    (root / 'triton').mkdir()
    (root / 'triton' / 'k.cubin').write_bytes(b'\x00\x01')
    (tmp_path / 'host-etc').mkdir()
    (tmp_path / 'host-etc' / 'shadow').write_text('root:$6$secret\n')
    cfg = {'address': '127.0.0.1', 'port': 0, 'allow': {'127.0.0.1'}, 'root': str(root),
           'token_sha256': css.token_digest(TOKEN),
           'files': {'vllm/a/rank0': 60, 'triton/k.cubin': 2, 'vllm/escape/shadow': 15}}
    server = start(cfg)
    yield root, server.server_address[1], tmp_path
    server.shutdown()
    server.server_close()


def get(port, path, token=TOKEN, address='127.0.0.1'):
    conn = http.client.HTTPConnection(address, port, timeout=5)
    conn.request('GET', path, headers={'Authorization': 'Bearer %s' % token} if token else {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def test_a_listed_file_is_served_to_the_fleet_with_the_token(seed):
    dummy, port, dummy = seed
    assert get(port, '/vllm/a/rank0') == (200, b'kernel' * 10)
    assert get(port, '/triton/k.cubin') == (200, b'\x00\x01')


@pytest.mark.parametrize('token', ['', 'wrong-token'])
def test_no_token_or_a_wrong_one_is_refused(seed, token):
    dummy, port, dummy = seed
    assert get(port, '/vllm/a/rank0', token=token)[0] == 401


def test_nothing_off_the_manifest_and_no_listing(seed):
    root, port, dummy = seed
    (root / 'vllm' / 'unlisted').write_text('x')
    for path in ('/', '/vllm/', '/vllm/unlisted', '/inkling-cache-key.json', '/vllm/a/../a/rank0'):
        assert get(port, path)[0] == 404, path


def test_a_planted_link_is_never_followed(seed):
    """The manifest names vllm/escape/shadow (a listing made before the link was planted, or a forged one): the
    server still refuses to follow vllm/escape -> a host directory, and a file swapped for a link."""
    root, port, tmp_path = seed
    os.symlink(str(tmp_path / 'host-etc'), str(root / 'vllm' / 'escape'))
    assert get(port, '/vllm/escape/shadow')[0] == 404
    os.unlink(str(root / 'triton' / 'k.cubin'))
    os.symlink(str(tmp_path / 'host-etc' / 'shadow'), str(root / 'triton' / 'k.cubin'))
    status, body = get(port, '/triton/k.cubin')
    assert status == 404 and b'secret' not in body


def test_a_file_changed_since_listing_is_refused(seed):
    root, port, dummy = seed
    (root / 'triton' / 'k.cubin').write_bytes(b'\x00' * 4096)
    assert get(port, '/triton/k.cubin')[0] == 409


def test_an_address_outside_the_fleet_gets_nothing(tmp_path):
    root = tmp_path / 'set'
    (root / 'vllm').mkdir(parents=True)
    (root / 'vllm' / 'f').write_bytes(b'x')
    server = start({'address': '127.0.0.1', 'port': 0, 'allow': {'10.9.9.9'}, 'root': str(root),
                    'token_sha256': css.token_digest(TOKEN), 'files': {'vllm/f': 1}})
    try:
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            get(server.server_address[1], '/vllm/f')
    finally:
        server.shutdown()
        server.server_close()


def test_served_writes_a_root_only_config_without_the_token_and_a_sandboxed_unit(tmp_path):
    """compile_cache state=served with stand-ins for systemctl and systemd-run: the unit runs the server as nobody with
    only CAP_DAC_READ_SEARCH on a read-only file system; the token is in no argument and no file, only its hash."""
    from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache as wc
    key = wc.cache_key('sm90-patched', 'sha256:' + '1' * 64, 'NVIDIA H200', 8, '580.159.04', 8)
    cache = tmp_path / 'set'
    (cache / 'vllm').mkdir(parents=True)
    (cache / 'vllm' / 'f').write_bytes(b'abc')
    (cache / wc.KEY_FILE).write_text(json.dumps(key))
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'systemctl').write_text('#!/bin/sh\nexit 0\n')
    (bindir / 'systemd-run').write_text('#!/bin/sh\nprintf "%%s\\n" "$@" > %s\n' % (tmp_path / 'argv'))
    for name in ('systemctl', 'systemd-run'):
        os.chmod(str(bindir / name), 0o755)
    port = css_free_port()
    # the stand-in systemd-run starts nothing: answer the module's wait on the port ourselves
    listener = socket.socket()
    listener.bind(('127.0.0.1', port))
    listener.listen(1)
    try:
        rc, res = run_module('compile_cache', {
            'state': 'served', 'cache_dir': str(cache), 'subdirs': ['vllm', 'triton'], 'key': key,
            'address': '127.0.0.1', 'port': port, 'token': TOKEN, 'allow': ['localhost', 'no-such-host.invalid'],
            'rundir': str(tmp_path / 'run')}, env={'PATH': '%s:%s' % (bindir, os.environ['PATH'])}, tmp_path=tmp_path)
    finally:
        listener.close()
    assert rc == 0, res
    argv = (tmp_path / 'argv').read_text().splitlines()
    for prop in ('User=nobody', 'CapabilityBoundingSet=CAP_DAC_READ_SEARCH', 'ProtectSystem=strict',
                 'NoNewPrivileges=yes', 'RuntimeMaxSec=7200'):
        assert '--property=%s' % prop in argv, argv
    config = tmp_path / 'run' / 'inkling-cache-seed.service.json'
    assert stat.S_IMODE(os.stat(str(tmp_path / 'run')).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(str(config)).st_mode) == 0o600
    cfg = json.loads(config.read_text())
    assert cfg['files'] == {'vllm/f': 3} and cfg['token_sha256'] == css.token_digest(TOKEN)
    assert '127.0.0.1' in cfg['allow'] and 'no-such-host.invalid' in res['reason']
    everything = ' '.join(argv) + config.read_text() + (tmp_path / 'run' / 'server.py').read_text() + json.dumps(res)
    assert TOKEN not in everything


def css_free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
