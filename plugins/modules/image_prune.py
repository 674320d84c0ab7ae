#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: image_prune
short_description: Remove old images of given repositories, keeping the newest and the rollback target
version_added: "0.1.0"
description:
  - Removes images of O(repositories) from podman's local storage so that, once the target image
    is pulled, at most O(keep) of them remain, the target, then O(protect) in order (the
    rollback target), then the newest.
  - One slot is reserved for the target even before it is pulled, so pruning can run first and
    free space for the pull.
  - An image used by any container (running or stopped) is never removed; it is kept beyond
    O(keep) if need be.
  - Images of other repositories are never touched, nor images without a name.
  - So that the M(inkling.fleet.image) role changes the host in one module run, it also writes, each
    only when its options are given and in this order, the registry auth file O(auth_file) from
    O(registry_auth) (containers-auth.json, owner root, mode C(0600), its directory mode C(0755); its
    content never appears in the output, nor in the diff), the registries.conf drop-in O(mirror_dropin)
    (mode C(0644); removed when O(mirror_content) is empty), then, after the prune, the pin record
    O(record) (what M(inkling.fleet.image_pin) returns as RV(inkling.fleet.image_pin#module:record)) to
    O(record_path) (mode C(0644), its directory mode C(0755)).
  - Each file is changed only when its content, mode or owner differ; in diff mode the drop-in and the
    record show their content, directories and a removal their state, as the builtin modules do.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  registry_auth:
    description:
      - Registry credentials to write to O(auth_file); empty leaves O(auth_file) alone (not managed).
    type: list
    elements: dict
    default: []
    suboptions:
      registry:
        description: Registry host (and port), as in the image references.
        type: str
        required: true
      username:
        description: User name.
        type: str
        required: true
      password:
        description: Password or token (never logged, a C(no_log) option).
        type: str
        required: true
  auth_file:
    description:
      - The auth file every pull uses; required when O(registry_auth) is not empty.
    type: path
  mirror_dropin:
    description:
      - The registries.conf drop-in of site mirrors; omitted, the drop-in is not managed.
    type: path
  mirror_content:
    description:
      - The drop-in's content (the role renders its template on the controller); empty removes O(mirror_dropin).
    type: str
    default: ''
  repositories:
    description:
      - Repositories (C(registry/path), no tag or digest) whose images are managed; omitted, nothing
        is pruned (the files alone are written).
    type: list
    elements: str
  keep:
    description:
      - How many images of O(repositories) to keep, the target included (2 = current + previous).
    type: int
    default: 2
  target_digest:
    description:
      - Digest of the image about to be pulled (kept if present); its slot is reserved anyway.
    type: str
  protect:
    description:
      - Digests to keep first after the target, in order (the rollback target).
    type: list
    elements: str
    default: []
  record:
    description:
      - The pin record to write to O(record_path); omitted, the record is not written.
    type: dict
  record_path:
    description:
      - Where the pin record is kept.
    type: path
    default: /var/lib/inkling/image/resolved.json
  owner:
    description:
      - Owner of the files and directories written (the role keeps C(root)).
    type: str
    default: root
  group:
    description:
      - Group of the files and directories written (the role keeps C(root)).
    type: str
    default: root
  executable:
    description:
      - Podman executable (for the prune).
    type: str
    default: podman
extends_documentation_fragment:
  - inkling.fleet.attributes
  - inkling.fleet.attributes.check_full_diff_full
notes:
  - The work is done by C(plugins/module_utils/image_host.py), the prune's decisions by
    C(plugins/module_utils/image_ref.py).
seealso:
  - module: inkling.fleet.image_pin
  - module: inkling.fleet.registry_login
  - module: containers.podman.podman_prune
'''

EXAMPLES = r'''
- name: Keep the current and the previous vLLM image, nothing older
  inkling.fleet.image_prune:
    repositories:
      - quay.io/vllm/automation-vllm
    keep: 2
    target_digest: "{{ pin.digest }}"
    protect: ["{{ pin.recorded.digest }}"]

- name: Auth file, no mirror, prune to two images, record the pin
  inkling.fleet.image_prune:
    registry_auth:
      - registry: quay.io
        username: robot
        password: "{{ vault_quay_password }}"
    auth_file: /etc/inkling/registry-auth.json
    mirror_dropin: /etc/containers/registries.conf.d/50-inkling-mirror.conf
    mirror_content: ""
    repositories: [quay.io/vllm/automation-vllm]
    keep: 2
    target_digest: "{{ pin.digest }}"
    protect: ["{{ pin.recorded.digest }}"]
    record: "{{ pin.record }}"
    record_path: /var/lib/inkling/image/resolved.json

- name: Record the pin once the image is on the host
  inkling.fleet.image_prune:
    record: "{{ pin.record }}"
'''

RETURN = r'''
removed:
  description: Images removed (or that would be removed in check mode); empty without O(repositories).
  returned: success
  type: list
  elements: dict
  sample: [{"id": "73768b97...", "names": ["quay.io/vllm/automation-vllm:old"], "reason": "beyond image_keep=2"}]
kept:
  description: Images of O(repositories) kept, with the reason.
  returned: success
  type: list
  elements: dict
  sample: [{"id": "5d2c...", "names": [], "reason": "rollback target"}]
auth_file:
  description: The auth file and whether it (or its directory) changed.
  returned: when O(registry_auth) is not empty
  type: dict
  sample: {"path": "/etc/inkling/registry-auth.json", "changed": false}
mirror_dropin:
  description: The drop-in, its state (C(file) or C(absent)) and whether it changed.
  returned: when O(mirror_dropin) is given
  type: dict
  sample: {"path": "/etc/containers/registries.conf.d/50-inkling-mirror.conf", "state": "absent", "changed": false}
record:
  description: The record file and whether it (or its directory) changed.
  returned: when O(record) is given
  type: dict
  sample: {"path": "/var/lib/inkling/image/resolved.json", "changed": true}
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.image_host import (
    ImageHostConfig, ImageHostError, check_prune_args)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            registry_auth=dict(type='list', elements='dict', default=[], options=dict(
                registry=dict(type='str', required=True),
                username=dict(type='str', required=True),
                password=dict(type='str', required=True, no_log=True),
            )),
            auth_file=dict(type='path'),
            mirror_dropin=dict(type='path'),
            mirror_content=dict(type='str', default=''),
            repositories=dict(type='list', elements='str'),
            keep=dict(type='int', default=2),
            target_digest=dict(type='str'),
            protect=dict(type='list', elements='str', default=[]),
            record=dict(type='dict'),
            record_path=dict(type='path', default='/var/lib/inkling/image/resolved.json'),
            owner=dict(type='str', default='root'),
            group=dict(type='str', default='root'),
            executable=dict(type='str', default='podman'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['registry_auth'] and not p['auth_file']:
        module.fail_json(msg='image: registry_auth needs auth_file')
    problem = check_prune_args(p['keep'], [p['target_digest']] + p['protect']) if p['repositories'] else ''
    if problem:
        module.fail_json(msg=problem)
    host = ImageHostConfig(module, owner=p['owner'], group=p['group'])
    try:
        if p['registry_auth']:
            host.auth_file(p['auth_file'], p['registry_auth'])
        if p['mirror_dropin']:
            host.mirror_dropin(p['mirror_dropin'], p['mirror_content'])
        if p['repositories']:
            host.prune(module.get_bin_path(p['executable'], required=True), p['repositories'], p['keep'],
                       target_digest=p['target_digest'], protect=p['protect'])
        if p['record']:
            host.record(p['record_path'], p['record'])
    except (ImageHostError, IOError, OSError) as exc:
        module.fail_json(msg=str(exc), changed=host.changed, **host.report)
    result = dict(host.report, changed=host.changed)
    result.setdefault('removed', [])
    result.setdefault('kept', [])
    if module._diff:
        result['diff'] = host.diff
    module.exit_json(**result)


if __name__ == '__main__':
    main()
