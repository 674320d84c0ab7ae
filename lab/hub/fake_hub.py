#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""TEST DOUBLE of the Hugging Face hub HTTP API, for the inkling.fleet lab and tests only.

It is not a hub and not a mirror: it serves, read-only, the repositories that
``make-model.py`` wrote under ``--root``, through the few endpoints that
``huggingface_hub`` 2.4.0 uses to download a snapshot (see README.md), with
true ``Range`` resume, the hub's error codes, a byte counter and fault
injection for tests. Standard library only; Python 3.9+.

Repository store (written by make-model.py)::

    ROOT/models/ORG/NAME/refs.json           {"branches": {"main": SHA}, "tags": {"v1.0": SHA}}
    ROOT/models/ORG/NAME/commits/SHA/...     the files of that commit

Control endpoints (not part of the hub API, prefixed ``/_fake/``):

    GET    /_fake/stats     {"bytes_served", "requests", "range_requests", "by_path": {repo/path: bytes}}
    POST   /_fake/reset     zero the counters
    POST   /_fake/faults    add a fault: {"path": "model-00002-of-00004.safetensors", "drop_at": 100000,
                            "times": 1}: a GET of that file is cut (connection closed) once the served
                            bytes reach absolute offset drop_at, for the next `times` requests
                            ("stall_s": N sleeps N s at that offset instead of closing).
    DELETE /_fake/faults    clear faults
    GET    /_fake/health    "ok"
"""

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = ('.safetensors', '.bin', '.pt', '.gguf', '.h5', '.msgpack', '.onnx')
LFS_MIN_SIZE = 1024 * 1024
CHUNK = 256 * 1024


def is_lfs(path, size):
    return path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE


def file_meta(full, rel):
    size = os.path.getsize(full)
    sha1 = hashlib.sha1(b'blob %d\0' % size)
    sha256 = hashlib.sha256()
    with open(full, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            sha1.update(chunk)
            sha256.update(chunk)
    meta = {'path': rel, 'size': size, 'full': full, 'lfs': None}
    if is_lfs(rel, size):
        pointer = ('version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n'
                   % (sha256.hexdigest(), size)).encode()
        meta['lfs'] = {'sha256': sha256.hexdigest(), 'size': size, 'pointerSize': len(pointer)}
        meta['blobId'] = hashlib.sha1(b'blob %d\0' % len(pointer) + pointer).hexdigest()
        meta['etag'] = sha256.hexdigest()
    else:
        meta['blobId'] = sha1.hexdigest()
        meta['etag'] = sha1.hexdigest()
    return meta


class Store(object):
    """Repositories on disk, with metadata computed once per commit."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self._cache = {}
        self._lock = threading.Lock()

    def repo_path(self, repo_id):
        if not re.match(r'^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$', repo_id):
            return None
        p = os.path.join(self.root, 'models', *repo_id.split('/'))
        return p if os.path.isfile(os.path.join(p, 'refs.json')) else None

    def resolve(self, repo_id, rev):
        """Return (commit or None, repo_exists)."""
        rp = self.repo_path(repo_id)
        if rp is None:
            return None, False
        with open(os.path.join(rp, 'refs.json')) as f:
            refs = json.load(f)
        for kind in ('branches', 'tags'):
            if rev in refs.get(kind, {}):
                return refs[kind][rev], True
        if re.match(r'^[0-9a-f]{40}$', rev) and os.path.isdir(os.path.join(rp, 'commits', rev)):
            return rev, True
        return None, True

    def files(self, repo_id, commit):
        key = (repo_id, commit)
        with self._lock:
            if key not in self._cache:
                base = os.path.join(self.repo_path(repo_id), 'commits', commit)
                out = {}
                for d, _dirs, names in os.walk(base):
                    for n in names:
                        full = os.path.join(d, n)
                        rel = os.path.relpath(full, base).replace(os.sep, '/')
                        out[rel] = file_meta(full, rel)
                self._cache[key] = dict(sorted(out.items()))
            return self._cache[key]


class Stats(object):
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.bytes_served = 0
        self.requests = 0
        self.range_requests = 0
        self.by_path = {}

    def add(self, key, n):
        with self.lock:
            self.bytes_served += n
            self.by_path[key] = self.by_path.get(key, 0) + n

    def to_dict(self):
        with self.lock:
            return {'bytes_served': self.bytes_served, 'requests': self.requests,
                    'range_requests': self.range_requests, 'by_path': dict(self.by_path)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'inkling-fake-hub/1'

    # ------------------------------------------------------------------ helpers
    def log_message(self, fmt, *args):  # quieter, to stderr
        if not self.server.quiet:
            sys.stderr.write('%s %s\n' % (self.address_string(), fmt % args))

    def send_json(self, code, data, extra=None):
        body = json.dumps(data).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def send_error_code(self, code, error_code, message):
        self.send_json(code, {'error': message}, {'X-Error-Code': error_code, 'X-Error-Message': message})

    def authorized(self):
        tok = self.server.token
        if not tok:
            return True
        if self.headers.get('Authorization') == 'Bearer %s' % tok:
            return True
        # the hub answers 401 RepoNotFound for private repos without a valid token
        self.send_error_code(401, 'RepoNotFound', 'Repository not found (invalid credentials)')
        return False

    def read_body(self):
        n = int(self.headers.get('Content-Length') or 0)
        return json.loads(self.rfile.read(n) or b'{}') if n else {}

    # ------------------------------------------------------------------ routing
    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == '/_fake/reset':
            self.server.stats.reset()
            return self.send_json(200, {'ok': True})
        if path == '/_fake/faults':
            fault = self.read_body()
            fault.setdefault('times', 1)
            with self.server.stats.lock:
                self.server.faults.append(fault)
            return self.send_json(200, {'faults': self.server.faults})
        self.send_error_code(404, 'EntryNotFound', 'no such endpoint')

    def do_DELETE(self):
        if urllib.parse.urlsplit(self.path).path == '/_fake/faults':
            with self.server.stats.lock:
                del self.server.faults[:]
            return self.send_json(200, {'faults': []})
        self.send_error_code(404, 'EntryNotFound', 'no such endpoint')

    def route(self):
        with self.server.stats.lock:
            self.server.stats.requests += 1
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = urllib.parse.parse_qs(url.query)
        if path == '/_fake/stats':
            return self.send_json(200, self.server.stats.to_dict())
        if path == '/_fake/health':
            return self.send_json(200, {'ok': True})
        m = re.match(r'^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$', path)
        if m:
            return self.api_info(m.group(1), m.group(2) or 'main')
        m = re.match(r'^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$', path)
        if m:
            return self.api_tree(m.group(1), m.group(2), (m.group(3) or '').strip('/'), query)
        m = re.match(r'^/(?:models/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$', path)
        if m:
            return self.resolve_file(m.group(1), m.group(2), m.group(3))
        self.send_error_code(404, 'EntryNotFound', 'unknown endpoint %s' % path)

    def lookup(self, repo_id, rev):
        if not self.authorized():
            return None
        commit, exists = self.server.store.resolve(repo_id, rev)
        if not exists:
            self.send_error_code(404, 'RepoNotFound', 'Repository not found')
            return None
        if commit is None:
            self.send_error_code(404, 'RevisionNotFound', 'Invalid rev id: %s' % rev)
            return None
        return commit

    # ------------------------------------------------------------------ endpoints
    def api_info(self, repo_id, rev):
        commit = self.lookup(repo_id, rev)
        if commit is None:
            return
        files = self.server.store.files(repo_id, commit)
        siblings = []
        for meta in files.values():
            sib = {'rfilename': meta['path'], 'size': meta['size'], 'blobId': meta['blobId']}
            if meta['lfs']:
                sib['lfs'] = dict(meta['lfs'])
            siblings.append(sib)
        self.send_json(200, {
            '_id': commit[:24], 'id': repo_id, 'modelId': repo_id, 'author': repo_id.split('/')[0],
            'sha': commit, 'private': False, 'gated': False, 'disabled': False, 'downloads': 0, 'likes': 0,
            'tags': [], 'library_name': 'transformers', 'lastModified': '2026-07-15T00:00:00.000Z',
            'createdAt': '2026-07-15T00:00:00.000Z', 'siblings': siblings,
            'usedStorage': sum(m['size'] for m in files.values()),
        })

    def api_tree(self, repo_id, rev, sub, query):
        commit = self.lookup(repo_id, rev)
        if commit is None:
            return
        recursive = (query.get('recursive', ['false'])[0].lower() in ('1', 'true'))
        files = self.server.store.files(repo_id, commit)
        prefix = sub + '/' if sub else ''
        if sub and sub not in files and not any(p.startswith(prefix) for p in files):
            return self.send_error_code(404, 'EntryNotFound', '%s does not exist at %s' % (sub, rev))
        out, dirs = [], set()
        for rel, meta in files.items():
            if not rel.startswith(prefix):
                continue
            rest = rel[len(prefix):]
            parts = rest.split('/')
            for i in range(1, len(parts)):
                d = prefix + '/'.join(parts[:i])
                if (recursive or i == 1) and d not in dirs:
                    dirs.add(d)
                    out.append({'type': 'directory', 'oid': hashlib.sha1(d.encode()).hexdigest(), 'size': 0,
                                'path': d})
            if not recursive and len(parts) > 1:
                continue
            item = {'type': 'file', 'oid': meta['blobId'], 'size': meta['size'], 'path': rel}
            if meta['lfs']:
                item['lfs'] = {'oid': meta['lfs']['sha256'], 'size': meta['size'],
                               'pointerSize': meta['lfs']['pointerSize']}
            out.append(item)
        self.send_json(200, out)

    def take_fault(self, key):
        with self.server.stats.lock:
            for fault in self.server.faults:
                if fault.get('path') in (key, key.split('/', 2)[-1]) and fault.get('times', 1) > 0:
                    fault['times'] = fault.get('times', 1) - 1
                    return dict(fault)
        return None

    def resolve_file(self, repo_id, rev, rel):
        commit = self.lookup(repo_id, rev)
        if commit is None:
            return
        meta = self.server.store.files(repo_id, commit).get(rel)
        if meta is None:
            return self.send_error_code(404, 'EntryNotFound', '%s does not exist at %s' % (rel, rev))
        size = meta['size']
        start, end, code = 0, size - 1, 200
        rng = self.headers.get('Range')
        if rng:
            m = re.match(r'^bytes=(\d*)-(\d*)$', rng.strip())
            if not m or (m.group(1) == '' and m.group(2) == ''):
                return self.send_error_code(416, 'RangeNotSatisfiable', 'bad range %s' % rng)
            if m.group(1) == '':
                start, end = max(size - int(m.group(2)), 0), size - 1
            else:
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            if start >= size or start > end:
                self.send_response(416)
                self.send_header('Content-Range', 'bytes */%d' % size)
                self.send_header('Content-Length', '0')
                self.end_headers()
                return
            code = 206
            with self.server.stats.lock:
                self.server.stats.range_requests += 1
        self.send_response(code)
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(end - start + 1))
        self.send_header('Accept-Ranges', 'bytes')
        self.send_header('ETag', '"%s"' % meta['etag'])
        self.send_header('X-Repo-Commit', commit)
        if meta['lfs']:
            self.send_header('X-Linked-Etag', '"%s"' % meta['etag'])
            self.send_header('X-Linked-Size', str(size))
        if code == 206:
            self.send_header('Content-Range', 'bytes %d-%d/%d' % (start, end, size))
        self.end_headers()
        if self.command == 'HEAD':
            return
        key = '%s/%s' % (repo_id, rel)
        fault = self.take_fault(key)
        rate = self.server.rate
        pos = start
        t0 = time.time()
        with open(meta['full'], 'rb') as f:
            f.seek(start)
            while pos <= end:
                n = min(CHUNK, end - pos + 1)
                if fault and fault.get('drop_at') is not None:
                    cut = int(fault['drop_at'])
                    if pos >= cut:
                        if fault.get('stall_s'):
                            time.sleep(float(fault['stall_s']))
                            fault = None
                        else:
                            self.close_connection = True
                            self.wfile.flush()
                            self.connection.shutdown(2)
                            return
                    else:
                        n = min(n, cut - pos)
                data = f.read(n)
                if not data:
                    break
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
                pos += len(data)
                self.server.stats.add(key, len(data))
                if rate:
                    ahead = (pos - start) / float(rate) - (time.time() - t0)
                    if ahead > 0:
                        time.sleep(ahead)


class FakeHub(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, root, token=None, rate=0, quiet=True):
        ThreadingHTTPServer.__init__(self, addr, Handler)
        self.store = Store(root)
        self.stats = Stats()
        self.faults = []
        self.token = token
        self.rate = rate
        self.quiet = quiet


def main(argv=None):
    ap = argparse.ArgumentParser(description='Test double of the Hugging Face hub API (inkling.fleet lab only).')
    ap.add_argument('--root', required=True, help='directory written by make-model.py')
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=8090)
    ap.add_argument('--token', default=os.environ.get('FAKE_HUB_TOKEN'),
                    help='require "Authorization: Bearer TOKEN" (default: no auth; env FAKE_HUB_TOKEN)')
    ap.add_argument('--rate', type=int, default=0, help='limit each download to this many bytes/s (0: none)')
    ap.add_argument('--verbose', action='store_true', help='log every request')
    args = ap.parse_args(argv)
    srv = FakeHub((args.host, args.port), args.root, token=args.token, rate=args.rate, quiet=not args.verbose)
    sys.stderr.write('fake hub (test double) serving %s on http://%s:%d\n' % (args.root, args.host, args.port))
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
