# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""What a failed ``podman pull`` or ``podman login`` means, from podman's own words, and whether to retry.

Kinds (``classify``):

- ``auth``: the registry refused the credentials or the access (``invalid username/password``,
  ``authentication required``, ``unauthorized``, ``denied``). Never retried.
- ``dns``: the registry's name does not resolve (``no such host``). Never retried: a name that does not
  exist does not appear within a retry delay.
- ``unreachable``: nothing answers at the registry's address (``connection refused``, ``no route to host``,
  ``network is unreachable``). Retried: a registry being restarted comes back.
- ``network``: the network or the registry failed in the middle (timeouts, resets, ``unexpected EOF``,
  HTTP 5xx and 429, a DNS server that did not answer). Retried.
- ``tls``: the registry's certificate is not trusted. Never retried.
- ``not_found``: the repository, tag or digest is not in the registry (``manifest unknown``). Never retried.
- ``other``: anything else. Never retried; podman's message is shown as it is.

The error strings are podman's (tests/unit/fixtures/podman-errors: podman 5.4.2 against the lab registry,
and public reports quoted there).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

RETRIED = frozenset(['unreachable', 'network'])

# (kind, pattern, reason). First match wins; the order puts the specific before the generic.
PATTERNS = (
    ('tls', r'x509: |tls: failed to verify certificate|certificate signed by unknown authority',
     'the registry\'s TLS certificate is not trusted'),
    ('auth', r'invalid username/password|incorrect username or password', 'the registry refused the credentials'),
    ('auth', r'authentication required|\bunauthorized\b|not authorized|requested access to the resource is denied|'
             r'\bdenied:|status 401|status 403|StatusCode: 401|StatusCode: 403',
     'the registry refused access with these credentials'),
    ('dns', r'no such host', 'the registry\'s name does not resolve'),
    ('network', r'Temporary failure in name resolution|server misbehaving|lookup [^ ]+ on [^ ]+: (?:read|dial) udp',
     'the DNS server did not answer'),
    ('unreachable', r'connection refused', 'nothing answers at the registry\'s address (connection refused)'),
    ('unreachable', r'no route to host|network is unreachable|host is unreachable',
     'the registry\'s address cannot be reached (no route)'),
    ('network', r'i/o timeout|TLS handshake timeout|context deadline exceeded|Client\.Timeout|timed out|'
                r'connection reset by peer|unexpected EOF|broken pipe|\bEOF$|'
                r'received unexpected HTTP status: 5\d\d|StatusCode: 5\d\d|status 5\d\d|toomanyrequests|'
                r'too many requests|StatusCode: 429|status 429|503 Service Unavailable|502 Bad Gateway',
     'the network or the registry failed during the request'),
    ('not_found', r'manifest unknown|name unknown|not found: manifest unknown|repository name not known|'
                  r'StatusCode: 404|status 404', 'the repository, tag or digest is not in the registry'),
)

NOISE = re.compile(r'level=warning|^Trying to pull |^Getting image source signatures|^Copying |^Writing manifest|'
                   r'^Storing signatures|Failed, retrying in')


def error_line(text):
    """podman's error, without its warnings and progress lines (the last ``Error:`` line, else the last line)."""
    lines = [l.strip() for l in (text or '').splitlines() if l.strip() and not NOISE.search(l)]
    errors = [l for l in lines if l.startswith('Error:')]
    line = errors[-1] if errors else (lines[-1] if lines else '')
    return re.sub(r'^Error:\s*', '', line)


def classify(text):
    """``{'kind', 'retry', 'reason', 'error'}`` for podman's output."""
    error = error_line(text)
    for kind, pattern, reason in PATTERNS:
        if re.search(pattern, error, re.I):
            return {'kind': kind, 'retry': kind in RETRIED, 'reason': reason, 'error': error}
    return {'kind': 'other', 'retry': False, 'reason': 'podman failed', 'error': error}


def registry_of(reference):
    """'lab-registry:5000/inkling/x@sha256:..' -> 'lab-registry:5000' (docker.io for a name without a host)."""
    first = (reference or '').split('/', 1)[0]
    if '/' in (reference or '') and ('.' in first or ':' in first or first == 'localhost'):
        return first
    return 'docker.io'


def address_detail(error):
    """The address or DNS server podman names (for the message), or ''."""
    match = re.search(r'dial tcp ([0-9a-fA-F.:\[\]]+:\d+)', error or '')
    if match:
        return ' (%s)' % match.group(1)
    match = re.search(r'lookup (\S+) on (\S+?):? ', error or '')
    if match:
        return ' (DNS server %s)' % match.group(2).rstrip(':')
    return ''


def remedy(kind, registry, auth_file_desc):
    return {
        'auth': 'fix the credentials for %s in image_registry_auth (inventory or vault), or check that the user may '
                'pull this repository; the auth file used was %s' % (registry, auth_file_desc),
        'dns': 'check the registry name in the variant\'s image.reference and the host\'s DNS (/etc/resolv.conf); '
               'for a site mirror set image_registries_conf_mirror',
        'unreachable': 'check that the registry %s is up and reachable from the host (firewall, proxy), or use a '
                       'mirror (image_registries_conf_mirror) or an archive (image_archive)' % registry,
        'network': 'check the host\'s network to %s (or its proxy); the pull was retried' % registry,
        'tls': 'trust the registry\'s CA on the host (/etc/containers/certs.d/%s/ca.crt)' % registry,
        'not_found': 'check that the repository, tag or digest exists in %s (the variant\'s image.reference and '
                     'image.digest)' % registry,
    }.get(kind, 'see podman\'s message')


def describe(kind, registry, error, reason):
    """The sentence that says what happened, in the operator's words."""
    if kind in ('dns', 'unreachable'):
        return 'registry %s unreachable from the host: %s%s' % (registry, reason, address_detail(error))
    if kind == 'auth':
        return 'registry %s: %s' % (registry, reason)
    return 'registry %s: %s' % (registry, reason)
