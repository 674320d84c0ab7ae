# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The piece-level relay of the hf_cache peer fan-out: a small TCP server that streams a blob to a receiver while
this host still receives it, and the receiver's side.

Why: a relay of whole blobs makes every hop wait for a whole blob before it passes the first byte on, and every
rsync connection costs a process, a handshake and a file list; on a chain of N hosts the last one ends about N - 1
blobs (and as many connection costs) after the seed. Here a hop passes each piece on as it is written.

The server (``serve``; this file runs as a script, stdlib only: inkling.fleet.hf_peer_serve writes it to the run
directory and runs it in the unit of the rsync daemon, so it stops with the daemon) answers only the fleet's
addresses, and only a client that proves it holds this run's secret: it sends a random challenge, the client answers
with HMAC-SHA256(secret, challenge) and the blobs it lacks, in its order, each with the hub's size. The server picks
the first of them it holds, verified (``blobs/ETAG``), else the first it is receiving now (the copy's
``.inkling/incoming/ETAG.part``, or the download's ``blobs/ETAG.incomplete``), waits up to ``hold_s`` for one, and
streams it from the first byte while it grows, until the size the client named. It never decides what is right:
the receiver hashes every byte and moves a blob in under its name only when size and sha256 are the hub's (a
forged or broken stream costs that blob, never the snapshot)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import hmac
import os
import re
import socket
import subprocess
import sys
import threading
import time

try:
    import socketserver
except ImportError:          # pragma: no cover (Python 2 has no use for this file; it only parses there)
    socketserver = None

# daemon_server: begin
try:
    from ansible_collections.inkling.fleet.plugins.module_utils import daemon_server
except ImportError:          # run as a script from module_utils/ (the unit tests); shipped, see script_source
    import daemon_server
# daemon_server: end

BANNER = 'INKLING-RELAY 1'
ETAG = re.compile(r'^[0-9a-f]{40}$|^[0-9a-f]{64}$')
PIECE = 1024 * 1024
MAX_REQUEST = 256 * 1024          # the wants of a snapshot of some 2,000 files
MAX_CLIENTS = 64                  # as the rsync daemon's max connections
HANDSHAKE_S = 10
PART_SUFFIX = '.part'


def proof(secret, challenge):
    """What a client sends to prove it holds secret: HMAC-SHA256 of the server's challenge, in hex."""
    return hmac.new(secret.encode('utf-8'), challenge.encode('ascii'), hashlib.sha256).hexdigest()


def part_path(inbox, etag):
    """Where hf_peer_copy writes a blob while it arrives by the relay (served by this host's relay as it grows)."""
    return os.path.join(inbox, etag + PART_SUFFIX)


def read_secret(path, user):
    """The secret of user in an rsync secrets file (USER:SECRET lines)."""
    with open(path) as f:
        for line in f:
            name, sep, secret = line.rstrip('\n').partition(':')
            if sep and name == user:
                return secret
    raise ValueError('%s has no secret for %s' % (path, user))


def plain_address(addr):
    """The client address as the fleet's list names it (an IPv4 address mapped into IPv6 as IPv4)."""
    return addr[7:] if addr.startswith('::ffff:') and '.' in addr else addr


class Blobs(object):
    """What this host holds or is receiving, on disk."""

    def __init__(self, blobs_dir, inbox):
        self.blobs_dir = blobs_dir
        self.inbox = inbox

    def complete(self, etag, size):
        path = os.path.join(self.blobs_dir, etag)
        try:
            return path if os.path.getsize(path) == size and not os.path.islink(path) else None
        except OSError:
            return None

    def partial(self, etag):
        for path in (part_path(self.inbox, etag), os.path.join(self.blobs_dir, etag + '.incomplete')):
            if os.path.isfile(path) and not os.path.islink(path):
                return path
        return None

    def pick(self, wants):
        """(etag, size, path) of the first wanted blob held verified, else of the first one arriving; None."""
        for etag, size in wants:
            path = self.complete(etag, size)
            if path:
                return etag, size, path
        for etag, size in wants:
            path = self.partial(etag)
            if path:
                return etag, size, path
        return None


def inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def stream_file(send, path, size, final, stall_s, piece=PIECE):
    """Send the first size bytes of path while it grows. final is the name the file gets once this host verified
    it (a rename, which keeps the open file): until final is this very file, the last byte is held back, so that
    no receiver completes a blob this host has not verified. Stops when the file is gone or replaced without
    becoming final (it failed verification here: the receiver throws its copy away and asks again), or when it
    did not grow for stall_s (this host's own transfer of it stalled). Returns the bytes sent."""
    sent = 0
    last = time.time()
    with open(path, 'rb') as f:
        mine = os.fstat(f.fileno()).st_ino
        while sent < size:
            verified = inode(final) == mine
            data = f.read(min(piece, size - sent - (0 if verified else 1)))
            if data:
                send(data)
                sent += len(data)
                last = time.time()
                continue
            if not verified and inode(path) != mine:
                break
            if time.time() - last > stall_s:
                break
            time.sleep(0.01)
    return sent


def read_line(sock, limit, deadline):
    """One request line from ``sock``: the bytes up to and including the first newline, at most
    ``limit`` of them, read before ``deadline`` (time.time()). One deadline for the whole line, not
    a timeout per recv, so a client that trickles bytes holds a slot for at most the handshake
    time. What came is returned as it is (without a newline when the time, the limit or the
    connection ran out)."""
    buf = bytearray()
    while len(buf) < limit:
        left = deadline - time.time()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(65536, limit - len(buf)))
        except socket.timeout:
            break
        if not chunk:
            break
        end = chunk.find(b'\n')
        if end >= 0:
            buf += chunk[:end + 1]
            break
        buf += chunk
    return bytes(buf)


class Handler(socketserver.StreamRequestHandler if socketserver else object):
    """One request: challenge, proof and wants, one blob streamed (or NONE after hold_s)."""

    def handle(self):
        cfg = self.server.cfg
        if plain_address(self.client_address[0]) not in cfg['allow']:
            return
        if not self.server.slots.acquire(False):
            self.wfile.write(b'NO busy\n')
            return
        try:
            self.serve(cfg)
        finally:
            self.server.slots.release()

    def serve(self, cfg):
        started = time.time()
        self.connection.settimeout(HANDSHAKE_S)
        challenge = os.urandom(16).hex()
        self.wfile.write(('%s %s\n' % (BANNER, challenge)).encode('ascii'))
        raw = read_line(self.connection, MAX_REQUEST, started + HANDSHAKE_S)
        line = raw.decode('ascii', 'replace').split()
        expected = proof(cfg['secret'], challenge).encode('ascii')
        if (time.time() - started > HANDSHAKE_S or not raw.endswith(b'\n') or len(line) < 2 or line[0] != 'WANT'
                or not hmac.compare_digest(line[1].encode('ascii', 'replace'), expected)):
            self.wfile.write(b'NO auth failed\n')
            return
        self.connection.settimeout(cfg['stall_s'])
        wants = []
        for item in line[2:]:
            etag, sep, size = item.partition(':')
            if not sep or not ETAG.match(etag) or not size.isdigit():
                self.wfile.write(b'NO bad request\n')
                return
            wants.append((etag, int(size)))
        blobs = Blobs(cfg['blobs_dir'], cfg['inbox'])
        deadline = time.time() + cfg['hold_s']
        got = blobs.pick(wants)
        while got is None and time.time() < deadline:
            time.sleep(0.02)
            got = blobs.pick(wants)
        if got is None:
            self.wfile.write(b'NONE\n')
            return
        etag, size, path = got
        self.wfile.write(('BLOB %s %d\n' % (etag, size)).encode('ascii'))
        stream_file(self.wfile.write, path, size, os.path.join(cfg['blobs_dir'], etag), cfg['stall_s'])


def make_server(cfg):
    """The threading TCP server of cfg (address, port, allow, secret, blobs_dir, inbox, hold_s, stall_s)."""
    return daemon_server.threading_server(cfg, Handler, MAX_CLIENTS)


def load_config(path):
    cfg = daemon_server.read_fleet_config(path)
    cfg['secret'] = read_secret(cfg.pop('secrets_file'), cfg['user'])
    return cfg


class RelayError(Exception):
    """The relay of a source could not be used (kind: 'connect', 'refused' or 'protocol')."""

    def __init__(self, kind, detail):
        super(RelayError, self).__init__(detail)
        self.kind = kind


class Stream(object):
    """A receiver's request to a source's relay: connect, prove the secret, name the blobs it lacks; then
    ``entry`` is the one the source streams (None: it held none of them within its hold time)."""

    def __init__(self, address, port, secret, wants, timeout, connect_timeout=5):
        try:
            self.sock = socket.create_connection((address, port), timeout=min(timeout, connect_timeout))
        except (OSError, socket.error) as exc:
            raise RelayError('connect', 'cannot connect to its relay at %s port %d: %s' % (address, port, exc))
        self.sock.settimeout(timeout)
        self.rfile = self.sock.makefile('rb')
        try:
            banner = self.rfile.readline(256).decode('ascii', 'replace').split()
            if not banner:
                raise RelayError('refused', 'its relay closed the connection without a word (this host is not a '
                                            'fleet address of this run?)')
            if len(banner) != 3 or ' '.join(banner[:2]) != BANNER:
                raise RelayError('protocol', 'its relay said %r, not %s' % (' '.join(banner)[:80], BANNER))
            request = 'WANT %s %s\n' % (proof(secret, banner[2]), ' '.join('%s:%d' % w for w in wants))
            self.sock.sendall(request.encode('ascii'))
            reply = self.rfile.readline(256).decode('ascii', 'replace').split()
        except socket.timeout:
            self.close()
            raise RelayError('connect', 'its relay did not answer within %d s' % timeout)
        except (OSError, socket.error) as exc:
            self.close()
            raise RelayError('connect', 'its relay closed the connection: %s' % exc)
        except RelayError:
            self.close()
            raise
        if reply[:1] == ['NONE']:
            self.etag = None
        elif len(reply) == 3 and reply[0] == 'BLOB':
            self.etag = reply[1]
        else:
            self.close()
            raise RelayError('refused', 'its relay refused: %s' % (' '.join(reply) or 'connection closed'))

    def read(self, n=PIECE):
        """Up to n bytes; b'' at the end; socket.timeout when nothing came for the timeout."""
        return self.rfile.read1(n) if hasattr(self.rfile, 'read1') else self.rfile.read(n)

    def close(self):
        try:
            self.rfile.close()
            self.sock.close()
        except (OSError, socket.error):
            pass


def confine(cfg):
    """Serve from inside the hub cache as the serving user, never as root (issue 36, finding 8), once the port is
    bound and the secret read: chroot to cfg['root'] (the hub cache folder, which holds the repository's blobs and
    inbox: the relay reaches nothing else of the host, whatever the modes of the folders above it), then switch to
    uid/gid. The repository's own folder may not exist yet (a receiver before its first blob), so the root is the
    cache folder above it. A chroot that fails is said in the unit's log and the relay still switches user: the
    relay never serves as root. Without root (or without a root folder) only the switch applies."""
    root = cfg.get('root')
    if root and os.getuid() == 0:
        moved = {}
        for key in ('blobs_dir', 'inbox'):
            rel = os.path.relpath(cfg[key], root)
            if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
                moved = None
                break
            moved[key] = os.path.join('/', rel)
        try:
            if moved is None:
                raise OSError('the blobs and the inbox are not inside %s' % root)
            os.chroot(root)
            os.chdir('/')
            cfg.update(moved)
        except OSError as exc:
            sys.stderr.write('inkling relay: cannot confine itself to %s (%s); serving unconfined, as uid %s\n'
                             % (root, exc, cfg.get('uid')))
            sys.stderr.flush()
    drop_privileges(cfg.get('uid'), cfg.get('gid'))


def drop_privileges(uid, gid):
    """Serve as the serving user, not as root (once the port is bound and the secret read)."""
    if os.getuid() != 0 or (uid is None and gid is None):
        return
    os.setgroups([])
    if gid is not None:
        os.setgid(gid)
    if uid is not None:
        os.setuid(uid)


def main(argv):
    """relay.py CONFIG.json [-- COMMAND...]: serve; with a command (the rsync daemon), run it beside the relay and
    end when it ends, so that the unit holds both or neither."""
    if len(argv) < 2 or (len(argv) > 2 and argv[2] != '--'):
        sys.stderr.write('usage: %s CONFIG.json [-- COMMAND...]\n' % argv[0])
        return 2
    cfg = load_config(argv[1])
    try:
        server = make_server(cfg)
    except (OSError, socket.error) as exc:
        # the relay only speeds the copy up: without it the receivers take whole blobs by rsync
        sys.stderr.write('inkling relay: cannot listen on %s port %d (%s); the rsync daemon serves alone\n'
                         % (cfg['address'], cfg['port'], exc))
        sys.stderr.flush()
        if len(argv) > 3:
            os.execv(argv[3], argv[3:])
        return 1
    child = subprocess.Popen(argv[3:]) if len(argv) > 3 else None
    confine(cfg)
    sys.stderr.write('inkling relay: serving %s on %s port %d to %d fleet address(es)\n'
                     % (cfg['blobs_dir'], cfg['address'], cfg['port'], len(cfg['allow'])))
    sys.stderr.flush()
    if child is None:
        server.serve_forever()
        return 0
    worker = threading.Thread(target=server.serve_forever)
    worker.daemon = True
    worker.start()
    return child.wait()


if __name__ == '__main__':
    raise SystemExit(main(sys.argv))
