#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""TEST DOUBLE of a load balancer's drain API, for molecule/default only.

Answers every POST/PUT/GET with 204 and appends one JSON line per request
({"t": epoch seconds, "method": ..., "path": ..., "query": {...}}) to --log, so the
scenario can check which hosts the rollout drained and undrained, and in which order.
Standard library only. Stops on a request to /_stop, or after --max-s seconds.
"""

import argparse
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def record(self):
        url = urllib.parse.urlsplit(self.path)
        entry = {'t': time.time(), 'method': self.command, 'path': url.path,
                 'query': dict(urllib.parse.parse_qsl(url.query))}
        length = int(self.headers.get('Content-Length') or 0)
        if length:
            self.rfile.read(length)
        with self.server.lock:
            with open(self.server.log_path, 'a') as f:
                f.write(json.dumps(entry, sort_keys=True) + '\n')
        self.send_response(204)
        self.end_headers()
        if url.path == '/_stop':
            threading.Thread(target=self.server.shutdown).start()

    do_GET = do_POST = do_PUT = record


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    ap.add_argument('--port', type=int, required=True)
    ap.add_argument('--log', required=True)
    ap.add_argument('--max-s', type=float, default=3600)
    args = ap.parse_args()
    server = ThreadingHTTPServer(('127.0.0.1', args.port), Handler)
    server.lock = threading.Lock()
    server.log_path = args.log
    timer = threading.Timer(args.max_s, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever()
    finally:
        # close the listening socket: a later double must be able to bind the port, and a
        # client must get "connection refused", not a hang in the accept backlog
        server.server_close()


if __name__ == '__main__':
    main()
