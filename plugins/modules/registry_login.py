#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: registry_login
short_description: Check registry credentials with podman login, to a throw-away auth file
version_added: "0.2.0"
description:
  - Runs C(podman login --password-stdin) for each registry against a temporary auth file that is removed
    afterwards, so that nothing on the host changes; the real auth file is written later by the image role.
  - Tells the failures apart like M(inkling.fleet.image_pull). Refused credentials fail at once (no retry),
    naming the registry, the user and the auth file the credentials are for. An unreachable registry (a name
    that does not resolve, a refused connection) says so instead of blaming the credentials. Only network
    errors (and refused connections) are retried.
  - Never logs a password.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  registries:
    description: The credentials to check.
    type: list
    elements: dict
    required: true
    suboptions:
      registry:
        description: The registry (C(host[:port])).
        type: str
        required: true
      username:
        description: The user.
        type: str
        required: true
      password:
        description: The password or token (never logged).
        type: str
        required: true
  auth_file:
    description: The auth file these credentials are written to afterwards (named in messages only).
    type: path
    required: true
  timeout_s:
    description: Seconds one login may take.
    type: int
    default: 120
notes:
  - Supports check mode (it only checks, and changes nothing in either mode).
seealso:
  - module: inkling.fleet.image_pull
extends_documentation_fragment:
  - inkling.fleet.podman
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Check the registry credentials before changing anything
  inkling.fleet.registry_login:
    registries: "{{ image_registry_auth }}"
    auth_file: /etc/inkling/registry-auth.json
    host: "{{ inventory_hostname }}"
  no_log: false
'''

RETURN = r'''
failures:
  description: One entry per registry that failed (C(registry), C(username), C(kind), C(error), C(attempts));
    never a password.
  returned: always
  type: list
  elements: dict
checked:
  description: The registries whose credentials were accepted.
  returned: always
  type: list
  elements: str
'''

import functools
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import podman_cli as pc_
from ansible_collections.inkling.fleet.plugins.module_utils import registry_errors as re_


def login(podman, auth_file, cred, timeout):
    argv = [podman, 'login', '--authfile', auth_file, '--username', str(cred['username']), '--password-stdin',
            str(cred['registry'])]
    return pc_.run_bounded(argv, timeout, 'login', stdin=str(cred['password']).encode())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pc_.PODMAN_RETRY_ARGS,
            registries=dict(type='list', elements='dict', required=True, options=dict(
                registry=dict(type='str', required=True),
                username=dict(type='str', required=True),
                password=dict(type='str', required=True, no_log=True))),
            auth_file=dict(type='path', required=True),
            timeout_s=dict(type='int', default=120),
        ),
        supports_check_mode=True,
    )
    p = module.params
    podman = pc_.podman_binary(module, p['podman_path'])
    failures, checked = [], []
    tmp = tempfile.mkdtemp(prefix='inkling-auth-check.')
    try:
        for number, cred in enumerate(p['registries']):
            auth = os.path.join(tmp, 'auth-%d.json' % number)
            attempts, found = pc_.with_retries(functools.partial(login, podman, auth, cred, p['timeout_s']),
                                               p['retries'], p['retry_delay_s'])
            if found is None:
                checked.append(cred['registry'])
            else:
                failures.append({'registry': cred['registry'], 'username': cred['username'],
                                 'kind': found['kind'], 'reason': found['reason'], 'error': found['error'],
                                 'attempts': len(attempts)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        parts = []
        for f in failures:
            if f['kind'] == 'auth':
                parts.append('the registry %s refused the credentials of %s (%s): podman: %s; not retried'
                             % (f['registry'], f['username'], 'for the auth file %s' % p['auth_file'], f['error']))
            else:
                parts.append('%s, so the credentials of %s could not be checked; podman: %s; %d attempt%s'
                             % (re_.describe(f['kind'], f['registry'], f['error'], f['reason']), f['username'],
                                f['error'], f['attempts'], '' if f['attempts'] == 1 else 's'))
        remedies = []
        for f in failures:
            text = re_.remedy(f['kind'], f['registry'], p['auth_file'])
            if text not in remedies:
                remedies.append(text)
        module.fail_json(
            msg='image: on host %s %s. Nothing was changed on the host (no image pruned or pulled, auth file %s '
                'untouched). Remedy: %s.' % (p['host'], '; '.join(parts), p['auth_file'], '; '.join(remedies)),
            failures=failures, checked=checked, error_kinds=sorted(set(f['kind'] for f in failures)))
    module.exit_json(changed=False, failures=[], checked=checked)


if __name__ == '__main__':
    main()
