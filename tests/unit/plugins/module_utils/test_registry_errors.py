# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""registry_errors: podman's real error output (tests/unit/fixtures/podman-errors, sources in its README)
classified into what happened and whether a retry can help."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import registry_errors as re_
from inkling_test_helpers import podman_error_sections

LAB = podman_error_sections('podman-5.4.2-lab.txt')
PUBLIC = podman_error_sections('public.txt')


@pytest.mark.parametrize('title,kind,retry', [
    ('login wrong password', 'auth', False),
    ('pull no credentials', 'auth', False),
    ('pull wrong credentials', 'auth', False),
    ('pull unknown tag', 'not_found', False),
    ('pull unknown digest', 'not_found', False),
    ('pull DNS failure', 'dns', False),
    ('login DNS failure', 'dns', False),
    ('pull connection refused', 'unreachable', True),
    ('login connection refused', 'unreachable', True),
    ('pull TLS unknown authority', 'tls', False),
    ('login TLS unknown authority', 'tls', False),
    ('pull http server (not a registry)', 'not_found', False),
])
def test_podman_542_against_the_lab_registry(title, kind, retry):
    found = re_.classify(LAB[title])
    assert (found['kind'], found['retry']) == (kind, retry), found


def test_the_error_line_drops_podmans_warnings():
    assert re_.error_line(LAB['login wrong password']) == 'logging into "lab-registry:5000": invalid username/password'
    assert re_.error_line(LAB['pull no credentials']) == (
        'initializing source docker://lab-registry:5000/inkling/vllm-standin:lab: reading manifest lab in '
        'lab-registry:5000/inkling/vllm-standin: authentication required')


def test_public_cases():
    by_title = dict((t.split(';')[0], body) for t, body in PUBLIC.items())
    kinds = dict((t, re_.classify(body)['kind']) for t, body in by_title.items())
    assert kinds == {
        'podman pull (its CI, 2022), a TLS handshake timeout (its own retry warning), then a V1 answer': 'other',
        "podman 5.0.3 pull, connection refused after podman's own three retries": 'unreachable',
        'podman pull, DNS lookup that could not be sent': 'network',
        'podman pull behind a proxy, name not resolved': 'dns',
    }


@pytest.mark.parametrize('error,kind', [
    ('Error: initializing source docker://r:5000/x:1: pinging container registry r:5000: Get "https://r:5000/v2/": '
     'dial tcp 10.0.0.5:5000: i/o timeout', 'network'),
    ('Error: copying system image: reading blob sha256:ab: fetching blob: received unexpected HTTP status: '
     '502 Bad Gateway', 'network'),
    ('Error: writing blob: happened during read: unexpected EOF', 'network'),
    ('Error: the pull did not finish within 60 s (timed out)', 'network'),
])
def test_network_errors_are_retried(error, kind):
    found = re_.classify(error)
    assert found['kind'] == kind and found['retry']


def test_unreachable_message_names_the_address_and_the_dns_server():
    refused = re_.classify(LAB['pull connection refused'])
    assert re_.describe(refused['kind'], 'lab-hub:5999', refused['error'], refused['reason']) == (
        "registry lab-hub:5999 unreachable from the host: nothing answers at the registry's address "
        '(connection refused) (10.89.64.3:5999)')
    dns = re_.classify(LAB['pull DNS failure'])
    assert re_.describe(dns['kind'], 'no-such-registry.invalid:5000', dns['error'], dns['reason']) == (
        "registry no-such-registry.invalid:5000 unreachable from the host: the registry's name does not resolve "
        '(DNS server 10.89.64.1:53)')


def test_registry_of():
    assert re_.registry_of('lab-registry:5000/inkling/x@sha256:' + 'a' * 64) == 'lab-registry:5000'
    assert re_.registry_of('quay.io/vllm/vllm-openai:v0.11.0') == 'quay.io'
    assert re_.registry_of('library/ubuntu') == 'docker.io'
    assert re_.registry_of('localhost/inkling-vllm-standin:lab') == 'localhost'
