#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: rollout_unit_state
short_description: Read a service unit's checksum and whether the service is active, in one call
version_added: "0.2.0"
description:
  - What the rollout's restart decision reads from a host once the unit is written, in one round trip
    instead of a M(ansible.builtin.stat) and a C(systemctl is-active) command.
  - The SHA-256 checksum of the unit file, as M(ansible.builtin.stat) reads it (a regular, readable file,
    not followed through a link); the empty string when there is none.
  - The answer of C(systemctl is-active) for the unit; the empty string and C(active=false) when the host
    has no systemctl.
  - With O(state_file) alone, the rollout's state file (what the host serves), for a restart entry point
    run without the preflight entry point before it in the same run; it is read before the unit is written.
  - Changes nothing.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit_path:
    description: The unit file (for a quadlet, the C(.container) file the service role writes); omitted, RV(unit_checksum) is not returned.
    type: path
  unit:
    description: The systemd unit asked with C(systemctl is-active); omitted, RV(active_state) and RV(active) are not returned.
    type: str
  state_file:
    description:
      - The rollout's state file, read without following a link (a link or an absent file reads as C({})).
      - Omitted, it is not read and RV(state) is not returned.
    type: path
notes:
  - Supports check mode; the module never changes the host.
seealso:
  - module: inkling.fleet.quadlet_unit
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Read the unit's checksum and whether the service is active
  inkling.fleet.rollout_unit_state:
    unit_path: /etc/containers/systemd/inkling-vllm.container
    unit: inkling-vllm.service
  register: unit_state

- name: Say whether it serves
  ansible.builtin.debug:
    msg: "{{ 'active' if unit_state.active else 'not active' }} ({{ unit_state.unit_checksum }})"
'''

RETURN = r'''
unit_checksum:
  description: SHA-256 of the unit file; empty when there is no readable regular file there.
  returned: when O(unit_path) is set
  type: str
  sample: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
active_state:
  description: What C(systemctl is-active) answered (C(active), C(inactive), C(failed), C(activating)...).
  returned: when O(unit) is set
  type: str
  sample: active
active:
  description: The service is active.
  returned: when O(unit) is set
  type: bool
state:
  description: The state file's record (image, revision, variant, unit checksum...); C({}) when there is none.
  returned: when O(state_file) is set
  type: dict
  sample: {"variant": "sm90-patched", "revision": "0123456789abcdef0123456789abcdef01234567"}
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.unit_state import UnitState


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit_path=dict(type='path'),
            unit=dict(type='str'),
            state_file=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    try:
        result = UnitState(module).read(module.params['unit_path'], module.params['unit'], module.params['state_file'])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
