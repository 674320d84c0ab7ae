#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: image_pin
short_description: Decide the digest that pins a container image reference
version_added: "0.1.0"
description:
  - Validates that an image reference is fully qualified (registry host first) and that any
    digest is a C(sha256:) digest; a short name is refused (field failure F12).
  - Chooses the digest that pins the reference, in this order, a digest inside the reference,
    O(digest) (the variant's C(image.digest)), O(resolved_digest) (just resolved from the tag),
    then the digest recorded in O(record_path) for the same reference on an earlier run.
    A reference whose tag was resolved once is not resolved again until the reference changes.
  - Reports whether the pinned image is already in local storage, and the record to write
    (the role writes it with M(ansible.builtin.copy) once the image is on the host).
  - Changes nothing on the host.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  reference:
    description:
      - Fully qualified image reference, C(registry/path[:tag][@sha256:...]).
    type: str
    required: true
  digest:
    description:
      - Digest that pins O(reference) (the variant's C(image.digest)); must agree with a
        digest inside O(reference).
    type: str
  resolved_digest:
    description:
      - Digest just resolved from the tag of O(reference) (by pulling the tag or loading an archive).
    type: str
  record_path:
    description:
      - JSON record of the last pin (C(reference), C(digest), C(pinned_reference), C(previous)).
        A missing file means nothing was recorded yet; an unreadable one is ignored with a warning.
    type: path
    default: /var/lib/inkling/image/resolved.json
  executable:
    description:
      - Podman executable, used to check whether the pinned image is in local storage.
    type: str
    default: podman
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
notes:
  - Pure decisions live in C(plugins/module_utils/image_ref.py).
seealso:
  - module: inkling.fleet.image_prune
  - module: containers.podman.podman_image
'''

EXAMPLES = r'''
- name: Decide the digest that pins the variant's image
  inkling.fleet.image_pin:
    reference: "{{ image_variant.image.reference }}"
    digest: "{{ image_variant.image.digest | default(omit, true) }}"
  register: pin

- name: Record a digest resolved from the tag
  inkling.fleet.image_pin:
    reference: quay.io/vllm/automation-vllm:cuda-29455473553
    resolved_digest: "sha256:{{ '0' * 64 }}"
'''

RETURN = r'''
reference:
  description: The reference as given.
  returned: success
  type: str
  sample: quay.io/vllm/automation-vllm:cuda-29455473553
repository:
  description: Registry and path, without tag or digest.
  returned: success
  type: str
  sample: quay.io/vllm/automation-vllm
tag:
  description: Tag of the reference, or null.
  returned: success
  type: str
  sample: cuda-29455473553
tagged_reference:
  description: C(repository:tag) (C(latest) when the reference has no tag), what a resolution pulls.
  returned: success
  type: str
digest:
  description: The pinning digest, or null when the tag must still be resolved.
  returned: success
  type: str
  sample: "sha256:4f2c..."
source:
  description: Where the digest came from, C(reference), C(variant), C(resolved), C(record), or null.
  returned: success
  type: str
pinned_reference:
  description: C(repository@digest), or null when the tag must still be resolved.
  returned: success
  type: str
resolve_needed:
  description: True when no digest is known yet and the tag has to be resolved.
  returned: success
  type: bool
previous:
  description: Pinned reference of the image recorded before this one (the rollback target), or null.
  returned: success
  type: str
present:
  description: True when the pinned image is already in podman's local storage.
  returned: success
  type: bool
recorded:
  description: The record read from O(record_path) (empty when none).
  returned: success
  type: dict
record:
  description: The record to write once the image is on the host, or null while the digest is unknown.
  returned: success
  type: dict
'''

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.image_ref import (
    IMAGE_PIN_ARGUMENT_SPEC, ImageRefError, plan_pin)


def read_record(module, path):
    """Return the recorded pin, or {} when missing or unreadable."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        module.warn('ignoring unreadable image record %s (%s); the tag will be resolved again' % (path, exc))
        return {}
    if not isinstance(data, dict):
        module.warn('ignoring image record %s: not a JSON object' % path)
        return {}
    return data


def main():
    module = AnsibleModule(argument_spec=IMAGE_PIN_ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    recorded = read_record(module, params['record_path'])
    try:
        plan = plan_pin(params['reference'], digest=params['digest'] or None, record=recorded,
                        resolved_digest=params['resolved_digest'] or None)
    except ImageRefError as exc:
        module.fail_json(msg='image: %s' % exc, reference=params['reference'])

    present = False
    if plan['pinned_reference']:
        executable = module.get_bin_path(params['executable'], required=True)
        rc, dummy, err = module.run_command([executable, 'image', 'exists', plan['pinned_reference']])
        if rc not in (0, 1):
            module.fail_json(msg='image: `podman image exists %s` failed (rc=%d): %s'
                             % (plan['pinned_reference'], rc, err.strip()))
        present = rc == 0
    module.exit_json(changed=False, present=present, recorded=recorded, **plan)


if __name__ == '__main__':
    main()
