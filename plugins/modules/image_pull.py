#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: image_pull
short_description: Pull a container image with podman, retrying only network errors
version_added: "0.2.0"
description:
  - Pulls O(reference) with C(podman pull), each attempt limited to O(timeout_s) seconds.
  - Tells podman's errors apart and retries only what a retry can fix. An authentication error fails at once,
    naming the registry and the auth file used. A name that does not resolve (DNS) or a registry nobody
    answers at says that the registry is unreachable. Timeouts, resets and HTTP 5xx/429 are retried up to
    O(retries) times, O(retry_delay_s) apart; a refused connection too (a registry being restarted). An
    untrusted certificate or an unknown tag or digest fails at once.
  - podman 5 retries pulls itself (C(--retry), default 3); the module passes C(--retry=0) to podman 5 and
    later so that this policy is the only one.
  - Does nothing when the image is already present, unless O(force) (pulling a tag to resolve its digest).
  - In check mode nothing is pulled; C(changed) and C(actions) say whether a pull would happen.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  reference:
    description: The image to pull (C(registry/repository@sha256:...) or C(registry/repository:tag)).
    type: str
    required: true
  auth_file:
    description: The auth file podman uses (C(--authfile)); podman's default when omitted.
    type: path
  force:
    description: Pull even when an image of that reference is present (a tag's current digest).
    type: bool
    default: false
  timeout_s:
    description: Seconds one attempt may take before it is stopped (a stalled registry does not hang the rollout).
    type: int
    default: 3600
seealso:
  - module: inkling.fleet.registry_login
  - module: inkling.fleet.image_pin
extends_documentation_fragment:
  - inkling.fleet.podman
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Pull the pinned image
  inkling.fleet.image_pull:
    reference: quay.io/vllm/vllm-openai@sha256:0123...
    auth_file: /etc/inkling/registry-auth.json
    retries: 3
    retry_delay_s: 30
    timeout_s: 3600
    host: "{{ inventory_hostname }}"
  async: 15000
  poll: 10
'''

RETURN = r'''
image:
  description: C(podman image inspect) of the image (a list of one), as containers.podman.podman_image returns it.
  returned: success, not in check mode
  type: list
  elements: dict
digest:
  description: The image's manifest digest.
  returned: success, not in check mode
  type: str
  sample: sha256:0f1e...
actions:
  description: What was done (C(Pulled image REFERENCE)), or would be done in check mode.
  returned: always
  type: list
  elements: str
attempts:
  description: Each failed attempt's C(kind) (auth, dns, unreachable, network, tls, not_found, other), C(error) and
    C(seconds).
  returned: always
  type: list
  elements: dict
error_kind:
  description: On failure, the kind of the last error.
  returned: failure
  type: str
  sample: auth
registry:
  description: The registry of the reference.
  returned: always
  type: str
  sample: quay.io
'''

import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import podman_cli as pc_
from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc
from ansible_collections.inkling.fleet.plugins.module_utils import registry_errors as re_


def auth_file_desc(auth_file):
    if auth_file:
        return '%s (image_auth_file)' % auth_file
    return ('none given (image_registry_auth is empty), so podman\'s default: /run/containers/0/auth.json for root, '
            'then $HOME/.docker/config.json')


def inspect(module, podman, reference):
    rc, out, _err = module.run_command([podman, 'image', 'inspect', reference])
    if rc != 0:
        return None
    try:
        return json.loads(out)
    except ValueError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pc_.PODMAN_RETRY_ARGS,
            reference=dict(type='str', required=True),
            auth_file=dict(type='path'),
            force=dict(type='bool', default=False),
            timeout_s=dict(type='int', default=3600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    podman = pc_.podman_binary(module, p['podman_path'])
    ref, registry = p['reference'], re_.registry_of(p['reference'])
    result = dict(changed=False, actions=[], attempts=[], registry=registry)
    present = inspect(module, podman, ref)
    if present and not p['force']:
        module.exit_json(image=present, digest=present[0].get('Digest'), **result)
    if module.check_mode:
        result.update(changed=True, actions=['Pulled image %s' % ref])
        module.exit_json(**result)
    rc, out, _err = module.run_command([podman, '--version'])
    argv = [podman, 'pull']
    if pc.version_ge(pc.parse_podman_version(out), '5.0'):
        argv.append('--retry=0')
    if p['auth_file']:
        argv.append('--authfile=%s' % p['auth_file'])
    argv.append(ref)
    result['attempts'], found = pc_.with_retries(lambda: pc_.run_bounded(argv, p['timeout_s'], 'pull'),
                                                 p['retries'], p['retry_delay_s'])
    if found is None:
        image = inspect(module, podman, ref)
        result.update(changed=True, actions=['Pulled image %s' % ref], image=image,
                      digest=(image or [{}])[0].get('Digest'))
        module.exit_json(**result)
    count = len(result['attempts'])
    tries = ('failed at once, not retried (%s errors are not retried)' % found['kind']) if not found['retry'] else \
        ('after %d attempt%s of at most %d s, %d s apart' % (count, '' if count == 1 else 's', p['timeout_s'],
                                                             p['retry_delay_s']))
    msg = ('image: host %s could not pull %s: %s; %s. podman: %s. Auth file: %s. The previous image and the running '
           'service are untouched. Remedy: %s.'
           % (p['host'], ref, re_.describe(found['kind'], registry, found['error'], found['reason']), tries,
              found['error'], auth_file_desc(p['auth_file']),
              re_.remedy(found['kind'], registry, auth_file_desc(p['auth_file']))))
    module.fail_json(msg=msg, error_kind=found['kind'], auth_file=p['auth_file'], **result)


if __name__ == '__main__':
    main()
