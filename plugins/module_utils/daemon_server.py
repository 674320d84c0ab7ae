# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""What the daemons that inkling.fleet ships to its hosts as one-file scripts share (cache_seed_server, run by
inkling.fleet.compile_cache, and hf_peer_relay, run by inkling.fleet.hf_peer_serve): their configuration file and
their threading TCP server with a bounded number of clients. Standard library only.

Inside the collection a script imports this file between its ``# daemon_server: begin`` and ``# daemon_server: end``
lines. On the host the script runs alone: ``script_source(module)`` is the text shipped, the script with those lines
replaced by the code of this file (everything below ``__metaclass__``), after which ``daemon_server`` names the
script itself; so the file on the host needs nothing but the standard library."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import threading

try:
    import socketserver
except ImportError:          # pragma: no cover (Python 2 has no use for this file; it only parses there)
    socketserver = None


def read_fleet_config(path):
    """The JSON configuration at path, its ``allow`` (the fleet's addresses) as a set."""
    with open(path) as f:
        cfg = json.load(f)
    cfg['allow'] = set(cfg['allow'])
    return cfg


def threading_server(cfg, handler, max_clients):
    """The threading TCP server on cfg's address (IPv6 when it has a colon) and port, with handler; cfg is its
    ``cfg`` and ``slots`` a semaphore of max_clients (a handler takes one without waiting, or turns the client
    away)."""
    family = socket.AF_INET6 if ':' in cfg['address'] else socket.AF_INET

    class Server(socketserver.ThreadingTCPServer):
        address_family = family
        allow_reuse_address = True
        daemon_threads = True

    server = Server((cfg['address'], cfg['port']), handler)
    server.cfg = cfg
    server.slots = threading.BoundedSemaphore(max_clients)
    return server


BEGIN = '# daemon_server: begin'
END = '# daemon_server: end'


def script_source(module):
    """The text of module (a script that imports this file between BEGIN and END) as shipped to a host: those
    lines replaced by this file's code, then ``daemon_server = sys.modules[__name__]``. Raises ValueError when
    the markers are missing or the script defines a name this file defines (it would replace this file's)."""
    import ast
    import inspect
    import sys

    script = inspect.getsource(module)
    mine = inspect.getsource(sys.modules[__name__])
    head, sep, rest = script.partition('\n' + BEGIN + '\n')
    dummy, sep2, tail = rest.partition('\n' + END + '\n')
    if not (sep and sep2):
        raise ValueError('%s has no %r ... %r lines' % (module.__name__, BEGIN, END))
    code = mine.split('\n__metaclass__ = type\n', 1)[1]

    def defined(text):
        return set(node.name for node in ast.parse(text).body
                   if isinstance(node, (ast.FunctionDef, ast.ClassDef)))
    clash = defined(head + '\n' + tail) & defined(code)
    if clash:
        raise ValueError('%s defines %s, which daemon_server defines' % (module.__name__, ', '.join(sorted(clash))))
    return '%s\n# daemon_server (inkling.fleet module_utils), shipped with this script\n%s\n' \
           'daemon_server = sys.modules[__name__]\n%s' % (head, code.strip('\n'), tail)
