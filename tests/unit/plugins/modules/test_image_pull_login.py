# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""image_pull and registry_login, run as Ansible runs them, with a podman that answers podman 5.4.2's real
error output (tests/unit/fixtures/podman-errors/podman-5.4.2-lab.txt) and counts its calls."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import sys

import pytest

from inkling_test_helpers import podman_error_sections, run_module

LAB = podman_error_sections('podman-5.4.2-lab.txt')

REF = 'lab-registry:5000/inkling/vllm-standin@sha256:' + 'a' * 64
AUTH = '/etc/inkling/registry-auth.json'
SECRET = 'not-the-password-123'

FAKE = r'''#!%(python)s
import json, sys
state_path = %(state)r
with open(state_path) as f:
    state = json.load(f)
args = sys.argv[1:]
state['calls'].append(args)
sys.stdin.read() if args[:1] == ['login'] else None
def save():
    with open(state_path, 'w') as f:
        json.dump(state, f)
if args == ['--version']:
    save(); print('podman version ' + state['version']); sys.exit(0)
if args[:2] == ['image', 'inspect']:
    save()
    if state['present'] or state.get('pulled'):
        print(json.dumps([{'Id': 'f' * 64, 'Digest': 'sha256:' + 'a' * 64}])); sys.exit(0)
    sys.stderr.write('Error: %%s: image not known\n' %% args[-1]); sys.exit(125)
if args[:1] in (['pull'], ['login']):
    answer = state['answers'].pop(0) if state['answers'] else [0, '']
    if answer[0] == 0 and args[0] == 'pull':
        state['pulled'] = True
    save()
    sys.stderr.write(answer[1]); sys.exit(answer[0])
save(); sys.exit(2)
'''


@pytest.fixture
def podman(tmp_path):
    state = tmp_path / 'state.json'
    path = tmp_path / 'podman'
    path.write_text(FAKE % {'python': sys.executable, 'state': str(state)})
    path.chmod(0o755)

    class Podman(object):
        def setup(self, answers, version='5.4.2', present=False):
            state.write_text(json.dumps({'answers': answers, 'version': version, 'present': present, 'calls': []}))

        @property
        def calls(self):
            return json.loads(state.read_text())['calls']

        def of(self, verb):
            return [c for c in self.calls if c[:1] == [verb]]

    result = Podman()
    result.path = str(path)
    return result


def pull(podman, tmp_path, check_mode=False, **over):
    args = {'reference': REF, 'auth_file': AUTH, 'retries': 2, 'retry_delay_s': 0, 'timeout_s': 30,
            'podman_path': podman.path, 'host': 'mol-img-01'}
    args.update(over)
    return run_module('image_pull', args, tmp_path=tmp_path, check_mode=check_mode)


def test_auth_error_fails_at_once_naming_registry_and_auth_file(podman, tmp_path):
    podman.setup([[125, LAB['pull wrong credentials']]] * 3)
    rc, result = pull(podman, tmp_path)
    assert result['failed'] and result['error_kind'] == 'auth'
    assert len(podman.of('pull')) == 1
    assert result['msg'].startswith(
        'image: host mol-img-01 could not pull %s: registry lab-registry:5000: the registry refused access with '
        'these credentials; failed at once, not retried (auth errors are not retried).' % REF)
    assert 'Auth file: /etc/inkling/registry-auth.json (image_auth_file)' in result['msg']
    assert podman.of('pull')[0] == ['pull', '--retry=0', '--authfile=' + AUTH, REF]


def test_a_refused_connection_is_retried_and_called_unreachable(podman, tmp_path):
    podman.setup([[125, LAB['pull connection refused']]] * 3)
    rc, result = pull(podman, tmp_path)
    assert result['failed'] and result['error_kind'] == 'unreachable'
    assert len(podman.of('pull')) == 3 and len(result['attempts']) == 3
    assert "registry lab-registry:5000 unreachable from the host: nothing answers at the registry's address" in \
        result['msg']
    assert 'after 3 attempts of at most 30 s, 0 s apart' in result['msg']


def test_a_name_that_does_not_resolve_is_unreachable_and_not_retried(podman, tmp_path):
    podman.setup([[125, LAB['pull DNS failure']]] * 3)
    rc, result = pull(podman, tmp_path)
    assert result['error_kind'] == 'dns' and len(podman.of('pull')) == 1
    assert "unreachable from the host: the registry's name does not resolve (DNS server 10.89.64.1:53)" in \
        result['msg']


def test_a_network_error_then_success(podman, tmp_path):
    podman.setup([[125, 'Error: reading blob sha256:ab: happened during read: unexpected EOF'], [0, '']])
    rc, result = pull(podman, tmp_path)
    assert rc == 0 and result['changed'] and result['digest'] == 'sha256:' + 'a' * 64
    assert [a['kind'] for a in result['attempts']] == ['network'] and len(podman.of('pull')) == 2


def test_podman_4_gets_no_retry_flag_and_no_auth_file_is_named(podman, tmp_path):
    podman.setup([[125, LAB['pull no credentials']]], version='4.9.3')
    rc, result = pull(podman, tmp_path, auth_file=None)
    assert podman.of('pull')[0] == ['pull', REF]
    assert "Auth file: none given (image_registry_auth is empty), so podman's default" in result['msg']


def test_present_image_and_check_mode_do_not_pull(podman, tmp_path):
    podman.setup([], present=True)
    rc, result = pull(podman, tmp_path)
    assert rc == 0 and not result['changed'] and podman.of('pull') == []
    podman.setup([])
    rc, result = pull(podman, tmp_path, check_mode=True)
    assert result['changed'] and result['actions'] == ['Pulled image ' + REF] and podman.of('pull') == []


def login(podman, tmp_path, **over):
    args = {'registries': [{'registry': 'lab-registry:5000', 'username': 'inkling-lab', 'password': SECRET}],
            'auth_file': AUTH, 'retries': 2, 'retry_delay_s': 0, 'podman_path': podman.path, 'host': 'mol-img-01'}
    args.update(over)
    return run_module('registry_login', args, tmp_path=tmp_path)


def test_wrong_password_one_attempt_names_registry_user_and_auth_file_not_the_password(podman, tmp_path):
    podman.setup([[125, LAB['login wrong password']]] * 3)
    rc, result = login(podman, tmp_path)
    assert result['failed'] and len(podman.of('login')) == 1
    assert result['msg'].startswith(
        'image: on host mol-img-01 the registry lab-registry:5000 refused the credentials of inkling-lab (for the '
        'auth file /etc/inkling/registry-auth.json): podman: logging into "lab-registry:5000": invalid '
        'username/password; not retried.')
    assert 'Nothing was changed on the host' in result['msg']
    assert SECRET not in json.dumps(result)
    assert podman.of('login')[0][-1] == 'lab-registry:5000' and SECRET not in json.dumps(podman.calls)


def test_unreachable_registry_is_not_called_refused_credentials(podman, tmp_path):
    podman.setup([[125, LAB['login DNS failure']]] * 3)
    rc, result = login(podman, tmp_path)
    assert result['failed'] and 'refused' not in result['msg']
    assert "registry lab-registry:5000 unreachable from the host: the registry's name does not resolve" in \
        result['msg']
    assert result['error_kinds'] == ['dns']


def test_login_ok(podman, tmp_path):
    podman.setup([[0, 'Login Succeeded!']])
    rc, result = login(podman, tmp_path)
    assert rc == 0 and result['checked'] == ['lab-registry:5000'] and not result['changed']
