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
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  repositories:
    description:
      - Repositories (C(registry/path), no tag or digest) whose images are managed.
    type: list
    elements: str
    required: true
  keep:
    description:
      - How many images of O(repositories) to keep, the target included (2 = current + previous).
    type: int
    default: 2
  target_digest:
    description:
      - Digest of the image about to be pulled (kept if present). Omit when not yet known;
        its slot is reserved anyway.
    type: str
  protect:
    description:
      - Digests to keep first after the target, in order (the rollback target).
    type: list
    elements: str
    default: []
  executable:
    description:
      - Podman executable.
    type: str
    default: podman
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
seealso:
  - module: inkling.fleet.image_pin
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
'''

RETURN = r'''
removed:
  description: Images removed (or that would be removed in check mode).
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
'''

import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.image_ref import ImageRefError, select_prune, validate_digest


def podman_json(module, executable, args):
    rc, out, err = module.run_command([executable] + args)
    if rc != 0:
        module.fail_json(msg='image: `podman %s` failed (rc=%d): %s' % (' '.join(args), rc, err.strip()))
    try:
        return json.loads(out or '[]') or []
    except ValueError as exc:
        module.fail_json(msg='image: cannot parse the JSON of `podman %s`: %s' % (' '.join(args), exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repositories=dict(type='list', elements='str', required=True),
            keep=dict(type='int', default=2),
            target_digest=dict(type='str'),
            protect=dict(type='list', elements='str', default=[]),
            executable=dict(type='str', default='podman'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['keep'] < 1:
        module.fail_json(msg='image: keep must be at least 1 (the target image), got %d' % params['keep'])
    try:
        for digest in [params['target_digest']] + params['protect']:
            if digest:
                validate_digest(digest)
    except ImageRefError as exc:
        module.fail_json(msg='image: %s' % exc)

    executable = module.get_bin_path(params['executable'], required=True)
    images = podman_json(module, executable, ['images', '--format', 'json'])
    containers = podman_json(module, executable, ['ps', '--all', '--format', 'json'])
    in_use = [c.get('ImageID') for c in containers]
    remove, kept = select_prune(images, params['repositories'], params['keep'],
                                target_digest=params['target_digest'] or None,
                                in_use_ids=in_use, protect_digests=[d for d in params['protect'] if d])
    if remove and not module.check_mode:
        for image in remove:
            rc, dummy, err = module.run_command([executable, 'rmi', image['id']])
            if rc != 0:
                module.fail_json(msg='image: could not remove old image %s (%s): %s'
                                 % (image['id'][:12], ', '.join(image['names']), err.strip()),
                                 removed=remove[:remove.index(image)], kept=kept)
    module.exit_json(changed=bool(remove), removed=remove, kept=kept)


if __name__ == '__main__':
    main()
