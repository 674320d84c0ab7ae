# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The compile cache seed server: serves one host's compile cache set to the later hosts of its cache key
(docs/warm-restarts.md), and nothing else (docs/security.md).

This file runs as a script, stdlib only: inkling.fleet.compile_cache (state served) writes it and its configuration,
root-only, to a runtime directory and runs it as a transient systemd unit, unprivileged (user nobody, with only
CAP_DAC_READ_SEARCH to read the root-only set, a read-only file system, RuntimeMaxSec). It answers

- only the addresses of the fleet (the configuration's ``allow``); any other gets the connection closed;
- only a client that sends this run's token (``Authorization: Bearer TOKEN``; the configuration holds its SHA-256);
- only ``GET /PATH`` for a PATH on the manifest listed before the server started (the configuration's ``files``),
  each opened through directory descriptors without following a link (the set is written by the container, which
  runs model code), and only while its size is still the listed one. No listing, no other path.

The receivers check every file's size and SHA-256 against the manifest, which reached them through the controller.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import hmac
import os
import socket
import stat
import sys

try:  # Python 3 only: the script runs with the host's python3
    import http.server as http_server
    from urllib.parse import unquote, urlsplit
except ImportError:  # pragma: no cover - keeps module_utils importable by Python 2 sanity checks
    http_server = None
    unquote = urlsplit = None

# daemon_server: begin
try:
    from ansible_collections.inkling.fleet.plugins.module_utils import daemon_server
except ImportError:          # run as a script from module_utils/ (the unit tests); shipped, see script_source
    import daemon_server
# daemon_server: end

MAX_CLIENTS = 32
IDLE_S = 30
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)


def token_digest(token):
    return hashlib.sha256(token.encode('utf-8')).hexdigest()


def plain_address(addr):
    """An IPv4 address as a client's IPv6-mapped form shows it, plain."""
    return addr[7:] if addr.startswith('::ffff:') else addr


def open_listed(root, rel):
    """A descriptor of the regular file ``rel`` below ``root``, no component followed if it is a link; None when
    something on the way is a link, not a directory, absent, or the file is not a regular file."""
    parts = rel.split('/')
    if not rel or any(p in ('', '.', '..') for p in parts):
        return None
    fd = os.open(root, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError:
                return None
            os.close(fd)
            fd = nfd
        try:
            ffd = os.open(parts[-1], FILE_FLAGS, dir_fd=fd)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(ffd).st_mode):
            os.close(ffd)
            return None
        return ffd
    finally:
        os.close(fd)


class Handler(http_server.BaseHTTPRequestHandler if http_server else object):
    server_version = 'inkling-cache-seed'
    sys_version = ''
    timeout = IDLE_S
    protocol_version = 'HTTP/1.1'

    def handle(self):
        if plain_address(self.client_address[0]) not in self.server.cfg['allow']:
            return
        if not self.server.slots.acquire(False):
            return
        try:
            http_server.BaseHTTPRequestHandler.handle(self)
        finally:
            self.server.slots.release()

    def _refuse(self, code, why):
        body = (why + '\n').encode('utf-8')
        self.send_response(code)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        cfg = self.server.cfg
        auth = self.headers.get('Authorization', '')
        token = auth[len('Bearer '):] if auth.startswith('Bearer ') else ''
        if not hmac.compare_digest(token_digest(token), cfg['token_sha256']):
            return self._refuse(401, 'this run\'s token is required')
        rel = unquote(urlsplit(self.path).path).lstrip('/')
        size = cfg['files'].get(rel)
        fd = open_listed(cfg['root'], rel) if size is not None else None
        if fd is None:
            return self._refuse(404, 'not on the manifest')
        try:
            if os.fstat(fd).st_size != size:
                return self._refuse(409, 'changed since it was listed')
            self.send_response(200)
            self.send_header('Content-Type', 'application/octet-stream')
            self.send_header('Content-Length', str(size))
            self.end_headers()
            left = size
            while left > 0:
                chunk = os.read(fd, min(1024 * 1024, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
        return None

    def do_HEAD(self):
        return self._refuse(405, 'GET only')

    do_POST = do_PUT = do_DELETE = do_HEAD

    def log_message(self, fmt, *args):
        sys.stderr.write('inkling cache seed: %s %s\n' % (self.client_address[0], fmt % args))


def load_config(path):
    cfg = daemon_server.read_fleet_config(path)
    cfg['files'] = dict((str(k), int(v)) for k, v in cfg['files'].items())
    return cfg


def make_server(cfg):
    return daemon_server.threading_server(cfg, Handler, MAX_CLIENTS)


def main(argv):
    """server.py CONFIG.json: serve until stopped (the unit's RuntimeMaxSec, or the rollout)."""
    if len(argv) != 2:
        sys.stderr.write('usage: %s CONFIG.json\n' % argv[0])
        return 2
    cfg = load_config(argv[1])
    try:
        server = make_server(cfg)
    except (OSError, socket.error) as exc:
        sys.stderr.write('inkling cache seed: cannot listen on %s port %d: %s\n' % (cfg['address'], cfg['port'], exc))
        return 1 if exc.errno != errno.EADDRINUSE else 3
    sys.stderr.write('inkling cache seed: serving %d files of %s on %s port %d to %d fleet address(es)\n'
                     % (len(cfg['files']), cfg['root'], cfg['address'], cfg['port'], len(cfg['allow'])))
    sys.stderr.flush()
    server.serve_forever()
    return 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv))
