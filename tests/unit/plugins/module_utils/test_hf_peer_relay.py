# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The relay of the peer fan-out (module_utils/hf_peer_relay.py) with the receiver's side
(hf_peer_fetch.receive_relay), over real sockets: what it streams, while a blob still arrives, to whom it refuses,
and what the receiver keeps."""

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_fetch as pf
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_relay as relay
from ansible_collections.inkling.fleet.plugins.modules import hf_peer_serve

SECRET = 'this-runs-secret'
PIECE = 256 * 1024
BLOB = os.urandom(4 * PIECE + 123)
ETAG = hashlib.sha256(BLOB).hexdigest()
ENTRY = hc.FileEntry('model-00001-of-00002.safetensors', len(BLOB), ETAG, True)


class Prog(object):
    def __init__(self):
        self.lock = threading.Lock()
        self.current = None


class Src(object):
    """What receive_relay reads of hf_peer_fetch.Sources."""

    def __init__(self, port, secret=SECRET, switch_after_s=2):
        self.addr = {'up': '127.0.0.1'}
        self.p = {'relay_port': port, 'secret': secret, 'switch_after_s': switch_after_s}
        self.answered = set()
        self.silent_since = {}


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_for_port(port):
    """Until something listens on 127.0.0.1:port (at most about 15 s)."""
    for dummy in range(50):
        try:
            socket.create_connection(('127.0.0.1', port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)


def repo(root, name):
    rdir = os.path.join(str(root), name)
    os.makedirs(os.path.join(rdir, 'blobs'))
    os.makedirs(pf.inbox_dir(rdir))
    return rdir


@pytest.fixture
def served(tmp_path):
    """A relay on 127.0.0.1 serving the repository folder up/ (hold 0.3 s, stall 1 s)."""
    rdir = repo(tmp_path, 'up')
    secrets = tmp_path / 'secrets'
    secrets.write_text('inkling-fleet:%s\n' % SECRET)
    cfg = {'address': '127.0.0.1', 'port': free_port(), 'allow': ['127.0.0.1'], 'secrets_file': str(secrets),
           'user': 'inkling-fleet', 'blobs_dir': os.path.join(rdir, 'blobs'), 'inbox': pf.inbox_dir(rdir),
           'hold_s': 0.3, 'stall_s': 1}
    (tmp_path / 'relay.json').write_text(json.dumps(cfg))
    server = relay.make_server(relay.load_config(str(tmp_path / 'relay.json')))
    worker = threading.Thread(target=server.serve_forever)
    worker.daemon = True
    worker.start()
    yield {'rdir': rdir, 'port': cfg['port'], 'server': server, 'cfg': cfg}
    server.shutdown()
    server.server_close()


def receive(port, down, entries=(ENTRY,), **kw):
    got = []
    res = pf.receive_relay(Src(port, **kw), 'up', down, list(entries), Prog(), got.append)
    return res, got


def test_a_verified_blob_is_streamed_and_moved_in_once_size_and_hash_are_the_hubs(tmp_path, served):
    with open(os.path.join(served['rdir'], 'blobs', ETAG), 'wb') as f:
        f.write(BLOB)
    down = repo(tmp_path, 'down')
    (got, kind, detail, dummy), verified = receive(served['port'], down)
    assert (got, kind, detail) == (1, None, None)
    assert verified == [ENTRY]
    with open(hc.blob_path(down, ETAG), 'rb') as f:
        assert f.read() == BLOB
    assert os.listdir(pf.inbox_dir(down)) == []       # the partial became the blob


def test_a_blob_is_streamed_on_while_it_still_arrives_at_the_source(tmp_path, served):
    """The source writes the first piece, then waits until the receiver has it before it writes the rest: a relay
    of whole blobs would wait for the rest first, and this test would fail on its timeout."""
    part = relay.part_path(pf.inbox_dir(served['rdir']), ETAG)
    down = repo(tmp_path, 'down')
    theirs = relay.part_path(pf.inbox_dir(down), ETAG)
    seen_early = []

    def source_receives():
        with open(part, 'wb', 0) as f:
            f.write(BLOB[:PIECE])
            deadline = time.time() + 5
            while time.time() < deadline:
                if os.path.exists(theirs) and os.path.getsize(theirs) >= PIECE:
                    seen_early.append(os.path.getsize(theirs))
                    break
                time.sleep(0.01)
            f.write(BLOB[PIECE:])
        os.rename(part, hc.blob_path(served['rdir'], ETAG))    # verified at the source: same file, final name
    writer = threading.Thread(target=source_receives)
    writer.start()
    try:
        (got, kind, dummy, dummy), verified = receive(served['port'], down)
    finally:
        writer.join()
    assert seen_early and seen_early[0] < len(BLOB), 'the receiver had nothing before the source had the whole blob'
    assert (got, kind, verified) == (1, None, [ENTRY])
    assert os.path.getsize(hc.blob_path(down, ETAG)) == len(BLOB)


def test_the_download_of_a_seed_is_streamed_from_its_incomplete_file(tmp_path, served):
    inc = hc.incomplete_path(served['rdir'], ETAG)
    with open(inc, 'wb') as f:
        f.write(BLOB)

    def seed_verifies():
        time.sleep(0.3)
        os.rename(inc, hc.blob_path(served['rdir'], ETAG))     # hf_download's finish_blob
    threading.Thread(target=seed_verifies).start()
    (got, kind, dummy, dummy), dummy = receive(served['port'], repo(tmp_path, 'down'))
    assert (got, kind) == (1, None)


def test_the_first_blob_held_verified_comes_before_one_still_arriving(tmp_path, served):
    other = os.urandom(1000)
    other_entry = hc.FileEntry('config.json', len(other), hashlib.sha256(other).hexdigest(), True)
    with open(relay.part_path(pf.inbox_dir(served['rdir']), ETAG), 'wb') as f:
        f.write(BLOB[:10])
    with open(hc.blob_path(served['rdir'], other_entry.etag), 'wb') as f:
        f.write(other)
    (got, kind, dummy, dummy), verified = receive(served['port'], repo(tmp_path, 'down'), [ENTRY, other_entry])
    assert (got, kind, verified) == (1, None, [other_entry])


@pytest.mark.parametrize('secret, allow, said', [
    ('not-the-secret', ['127.0.0.1'], 'auth failed'),
    (SECRET, ['10.0.0.1'], 'not a fleet address of this run'),
])
def test_the_relay_refuses_a_wrong_secret_and_an_address_outside_the_fleet(tmp_path, served, secret, allow, said):
    with open(os.path.join(served['rdir'], 'blobs', ETAG), 'wb') as f:
        f.write(BLOB)
    served['server'].cfg['allow'] = set(allow)
    down = repo(tmp_path, 'down')
    (got, kind, detail, dummy), verified = receive(served['port'], down, secret=secret)
    assert (got, kind, verified) == (0, 'relay', [])
    assert said in detail
    assert not os.path.exists(hc.blob_path(down, ETAG)) and os.listdir(pf.inbox_dir(down)) == []


def test_a_forged_stream_is_rejected_and_nothing_is_kept(tmp_path, served):
    forged = bytearray(BLOB)
    forged[PIECE] ^= 1
    with open(os.path.join(served['rdir'], 'blobs', ETAG), 'wb') as f:
        f.write(bytes(forged))
    down = repo(tmp_path, 'down')
    (got, kind, detail, bad), verified = receive(served['port'], down)
    assert (got, kind, bad, verified) == (0, 'hash', ENTRY, [])
    assert 'hub says %s' % ETAG in detail
    assert os.listdir(os.path.join(down, 'blobs')) == [] and os.listdir(pf.inbox_dir(down)) == []


def test_a_source_that_holds_none_says_so_after_its_hold_time(tmp_path, served):
    t0 = time.time()
    (got, kind, dummy, dummy), dummy = receive(served['port'], repo(tmp_path, 'down'))
    assert (got, kind) == (0, 'missing')
    assert time.time() - t0 >= 0.3


def test_a_blob_the_source_drops_as_wrong_ends_the_stream_at_once(tmp_path, served):
    part = relay.part_path(pf.inbox_dir(served['rdir']), ETAG)
    with open(part, 'wb') as f:
        f.write(BLOB[:PIECE])

    def drop():
        time.sleep(0.3)
        os.unlink(part)
    threading.Thread(target=drop).start()
    down = repo(tmp_path, 'down')
    t0 = time.time()
    (got, kind, dummy, dummy), dummy = receive(served['port'], down, switch_after_s=30)
    assert (got, kind) == (0, 'missing')            # asked again at once, the source is not blamed
    assert time.time() - t0 < 0.9                     # at the removal, not after the relay's stall_s (1 s)
    assert os.listdir(pf.inbox_dir(down)) == []


def test_the_last_byte_waits_until_the_source_verified_the_blob(tmp_path, served):
    part = relay.part_path(pf.inbox_dir(served['rdir']), ETAG)
    with open(part, 'wb') as f:
        f.write(BLOB)                                 # all there, not verified yet
    down = repo(tmp_path, 'down')
    theirs = relay.part_path(pf.inbox_dir(down), ETAG)
    sizes = []

    def verify_later():
        time.sleep(0.5)
        sizes.append(os.path.getsize(theirs))
        os.rename(part, hc.blob_path(served['rdir'], ETAG))
    checker = threading.Thread(target=verify_later)
    checker.start()
    (got, kind, dummy, dummy), verified = receive(served['port'], down)
    checker.join()
    assert sizes == [len(BLOB) - 1]                   # everything but the last byte before the source verified
    assert (got, kind, verified) == (1, None, [ENTRY])


def test_a_blob_that_fails_verification_at_the_source_costs_the_receiver_nothing_but_the_blob(tmp_path, served):
    """The source received a forged blob whole and streamed it on; its check fails and removes it: the receiver
    never completes it, so it does not blame (and drop) the honest source, and keeps nothing."""
    forged = bytearray(BLOB)
    forged[-1] ^= 1
    part = relay.part_path(pf.inbox_dir(served['rdir']), ETAG)
    with open(part, 'wb') as f:
        f.write(bytes(forged))

    def reject_later():
        time.sleep(0.5)
        os.unlink(part)
    threading.Thread(target=reject_later).start()
    down = repo(tmp_path, 'down')
    (got, kind, dummy, bad), verified = receive(served['port'], down, switch_after_s=30)
    assert (got, kind, bad, verified) == (0, 'missing', None, [])
    assert os.listdir(os.path.join(down, 'blobs')) == [] and os.listdir(pf.inbox_dir(down)) == []


def test_a_proof_that_is_not_ascii_is_refused_like_a_wrong_one(served):
    with socket.create_connection(('127.0.0.1', served['port']), 5) as sock:
        f = sock.makefile('rwb')
        assert f.readline().startswith(b'INKLING-RELAY 1 ')
        f.write(b'WANT \xff\xfe%s:1\n' % (b'0' * 64))
        f.flush()
        assert f.readline() == b'NO auth failed\n'


def test_a_client_that_trickles_its_request_loses_its_slot_at_the_handshake_deadline(served, monkeypatch):
    """One deadline for the whole handshake (issue 36, finding 11): a byte every 0.25 s never trips a
    per-recv timeout, yet the relay answers and closes once the handshake time is spent."""
    monkeypatch.setattr(relay, 'HANDSHAKE_S', 1)
    with socket.create_connection(('127.0.0.1', served['port']), 5) as sock:
        f = sock.makefile('rb')
        assert f.readline().startswith(b'INKLING-RELAY 1 ')
        t0 = time.time()
        answer = b''
        sock.settimeout(0.25)
        while time.time() - t0 < 4:
            try:
                sock.sendall(b'W')
                answer = sock.recv(100)
                if answer:
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        held = time.time() - t0
    assert answer == b'NO auth failed\n' and held < 2, (answer, held)


def test_a_source_whose_transfer_stalls_ends_the_stream_after_its_stall_bound(tmp_path, served):
    with open(relay.part_path(pf.inbox_dir(served['rdir']), ETAG), 'wb') as f:
        f.write(BLOB[:PIECE])
    t0 = time.time()
    (got, kind, dummy, dummy), dummy = receive(served['port'], repo(tmp_path, 'down'), switch_after_s=30)
    assert (got, kind) == (0, 'missing')
    assert 1 <= time.time() - t0 < 10                 # the relay's stall_s (1 s), not the receiver's 35 s


def test_a_source_without_a_relay_is_reported_for_rsync(tmp_path):
    (got, kind, detail, dummy), dummy = receive(free_port(), repo(tmp_path, 'down'))
    assert (got, kind) == (0, 'relay') and 'cannot connect' in detail


def test_a_relay_that_answered_before_and_now_does_not_is_gone(tmp_path, served):
    """A killed relay host: the receiver that had its answers says so at once, so that it leaves it before the
    hosts behind it give up waiting on it."""
    with open(os.path.join(served['rdir'], 'blobs', ETAG), 'wb') as f:
        f.write(BLOB)
    src = Src(served['port'])
    res = pf.receive_relay(src, 'up', repo(tmp_path, 'down'), [ENTRY], Prog(), lambda e: None)
    assert res[:2] == (1, None) and src.answered == {'up'}
    served['server'].shutdown()
    served['server'].server_close()
    got, kind, detail, dummy = pf.receive_relay(src, 'up', repo(tmp_path, 'again'), [ENTRY], Prog(), lambda e: None)
    assert (got, kind) == (0, 'gone') and 'cannot connect' in detail


def test_the_script_serves_beside_its_command_and_ends_with_it(tmp_path, served):
    """As hf_peer_serve runs it: python relay.py CONFIG -- COMMAND (the rsync daemon)."""
    with open(os.path.join(served['rdir'], 'blobs', ETAG), 'wb') as f:
        f.write(BLOB)
    cfg = dict(served['cfg'], port=free_port())
    (tmp_path / 'mine.json').write_text(json.dumps(cfg))
    proc = subprocess.Popen([sys.executable, relay.__file__, str(tmp_path / 'mine.json'), '--',
                             sys.executable, '-c', 'import time; time.sleep(3)'])
    try:
        wait_for_port(cfg['port'])
        (got, kind, dummy, dummy), dummy = receive(cfg['port'], repo(tmp_path, 'down'))
        assert (got, kind) == (1, None)
        assert proc.wait(10) == 0                     # ended with its command
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason='chroot and switching users need root (CI runs as root)')
def test_the_script_serves_confined_to_the_repository_as_the_unprivileged_user(tmp_path, served):
    """Issue 36, finding 8: started as root (to bind and read the secret), the relay chroots into the hub cache and
    serves as the dedicated user: it still streams the snapshot's blobs, its process is neither root nor able to
    see the host's files, and a blob only root may read is not streamed."""
    import pwd
    nobody = pwd.getpwnam('nobody')
    with open(os.path.join(served['rdir'], 'blobs', ETAG), 'wb') as f:
        f.write(BLOB)
    os.chmod(os.path.join(served['rdir'], 'blobs', ETAG), 0o644)
    os.chmod(served['rdir'], 0o755)
    os.chmod(os.path.join(served['rdir'], 'blobs'), 0o755)
    hidden = os.urandom(1000)
    hidden_etag = hashlib.sha256(hidden).hexdigest()
    with open(os.path.join(served['rdir'], 'blobs', hidden_etag), 'wb') as f:
        f.write(hidden)
    os.chmod(os.path.join(served['rdir'], 'blobs', hidden_etag), 0o600)
    cache = os.path.dirname(served['rdir'])
    os.chmod(cache, 0o755)
    cfg = dict(served['cfg'], port=free_port(), uid=nobody.pw_uid, gid=nobody.pw_gid, root=cache)
    (tmp_path / 'confined.json').write_text(json.dumps(cfg))
    proc = subprocess.Popen([sys.executable, relay.__file__, str(tmp_path / 'confined.json'), '--',
                             sys.executable, '-c', 'import time; time.sleep(8)'])
    try:
        wait_for_port(cfg['port'])
        with open('/proc/%d/status' % proc.pid) as f:
            uids = [line.split()[1:] for line in f if line.startswith(('Uid:', 'Gid:'))]
        assert uids == [[str(nobody.pw_uid)] * 4, [str(nobody.pw_gid)] * 4], uids
        assert os.readlink('/proc/%d/root' % proc.pid) == os.path.realpath(cache)
        (got, kind, dummy, dummy), dummy = receive(cfg['port'], repo(tmp_path, 'down'))
        assert (got, kind) == (1, None)
        entry = hc.FileEntry('secret.bin', len(hidden), hidden_etag, True)
        (got, kind, dummy, dummy), dummy = receive(cfg['port'], repo(tmp_path, 'down2'), entries=(entry,))
        assert got == 0 and not os.path.exists(os.path.join(str(tmp_path), 'down2', 'blobs', hidden_etag))
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.skipif(os.geteuid() != 0, reason='chroot and switching users need root (CI runs as root)')
def test_a_receiver_without_the_repository_folder_yet_keeps_its_relay_and_daemon(tmp_path):
    """A receiver's unit starts before its first blob, when its repository folder does not exist yet: the relay
    (the unit's main process) must not die confining itself, or the rsync daemon beside it dies too and the next
    host of the chain waits out its switch time. Once blobs arrive, they are streamed."""
    import pwd
    nobody = pwd.getpwnam('nobody')
    cache = tmp_path / 'hub'
    cache.mkdir(mode=0o755)
    rdir = os.path.join(str(cache), 'models--org--name')        # not there yet
    secrets = tmp_path / 'secrets'
    secrets.write_text('inkling-fleet:%s\n' % SECRET)
    rundir = tmp_path / 'run'
    rundir.mkdir()
    # the command and configuration exactly as hf_peer_serve writes them for the unit
    params = {'address': '127.0.0.1', 'relay_port': free_port(), 'relay_allow': ['127.0.0.1'],
              'secrets_path': str(secrets), 'user': 'inkling-fleet', 'relay_repo_dir': rdir, 'relay_hold_s': 0.3,
              'relay_stall_s': 1, 'rundir': str(rundir)}
    argv = hf_peer_serve.relay_command(params, (nobody.pw_uid, nobody.pw_gid))
    cfg = {'port': params['relay_port']}
    proc = subprocess.Popen(argv + [sys.executable, '-c', 'import time; time.sleep(8)'])
    try:
        wait_for_port(cfg['port'])
        time.sleep(0.5)
        assert proc.poll() is None, 'the relay died confining itself'
        os.makedirs(os.path.join(rdir, 'blobs'))
        os.makedirs(pf.inbox_dir(rdir))
        for path in (rdir, os.path.join(rdir, 'blobs')):
            os.chmod(path, 0o755)
        with open(os.path.join(rdir, 'blobs', ETAG), 'wb') as f:
            f.write(BLOB)
        os.chmod(os.path.join(rdir, 'blobs', ETAG), 0o644)
        (got, kind, dummy, dummy), dummy = receive(cfg['port'], repo(tmp_path, 'down'))
        assert (got, kind) == (1, None)
    finally:
        proc.kill()
        proc.wait(10)


def test_a_port_taken_by_another_process_leaves_the_command_running_alone(tmp_path, served):
    """The relay only speeds the copy up: when it cannot listen, the unit still holds the rsync daemon."""
    taken = socket.socket()
    taken.bind(('127.0.0.1', 0))
    taken.listen(1)
    cfg = dict(served['cfg'], port=taken.getsockname()[1])
    (tmp_path / 'taken.json').write_text(json.dumps(cfg))
    try:
        proc = subprocess.run([sys.executable, relay.__file__, str(tmp_path / 'taken.json'), '--', sys.executable,
                               '-c', 'print("the daemon ran")'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=30, check=False)
    finally:
        taken.close()
    assert proc.returncode == 0 and proc.stdout.strip() == 'the daemon ran'
    assert 'cannot listen on 127.0.0.1 port %d' % cfg['port'] in proc.stderr and 'serves alone' in proc.stderr
