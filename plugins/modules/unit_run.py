#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: unit_run
short_description: Start, restart or stop a service unit on purpose, with its start limit reset and its restart counter read
version_added: "0.2.0"
description:
  - The one deliberate start of the collection's service unit, for the service role, the rollout's restart and its
    rollback.
  - Before a start or a restart, C(systemctl reset-failed) O(unit), because a deliberate start must not use up
    C(StartLimitBurst), which is there to stop a crash loop (systemd.unit(5)). It also sets the restart counter
    C(NRestarts) back to 0. The counter is read right after, and returned as RV(nrestarts), the baseline of
    M(inkling.fleet.vllm_gate) (a restart above it is a crash).
  - O(state=started) leaves an active unit alone (nothing is reset; RV(nrestarts) is its counter now).
    O(state=stopped) stops a unit that is active or changing state.
  - With O(wait_s), after a start or a restart systemd is polled until the unit is active or has failed. A unit
    that is not active then fails the module, with its state and its last O(journal_lines) journal lines.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit:
    description: The service unit, for example C(inkling-vllm.service).
    type: str
    required: true
  state:
    description: What the unit is to be.
    type: str
    choices: [started, restarted, stopped]
    default: started
  enabled:
    description:
      - Run C(systemctl enable) O(unit) when it is not enabled. Leave it unset for a quadlet unit, which is generated
        and enabled by its C([Install]) section.
    type: bool
  daemon_reload:
    description: Run C(systemctl daemon-reload) first.
    type: bool
    default: false
  wait_s:
    description: After a start or restart, how long to wait for the unit to be active or failed; 0 does not wait.
    type: int
    default: 0
  journal_lines:
    description: How many of the unit's journal lines a failure shows.
    type: int
    default: 40
extends_documentation_fragment:
  - inkling.fleet.host_name
  - inkling.fleet.attributes.check_full_diff_none
seealso:
  - module: inkling.fleet.unit_restore
  - module: inkling.fleet.vllm_gate
'''

EXAMPLES = r'''
- name: Start the new server, and keep its restart counter as the gate's baseline
  inkling.fleet.unit_run:
    host: "{{ inventory_hostname }}"
    unit: inkling-vllm.service
    state: started
  register: started

- name: Gate it
  inkling.fleet.vllm_gate:
    url: http://127.0.0.1:8000
    served_model_name: inkling
    unit: inkling-vllm.service
    baseline_restarts: "{{ started.nrestarts }}"

- name: Restart a changed unit and wait until systemd says it is active
  inkling.fleet.unit_run:
    host: "{{ inventory_hostname }}"
    unit: inkling-vllm.service
    state: restarted
    wait_s: 120
'''

RETURN = r'''
action:
  description: What was (in check mode, would be) done to the unit, C(start), C(restart), C(stop), or an empty string.
  returned: always
  type: str
  sample: start
enabled:
  description: Whether C(systemctl enable) ran (or would).
  returned: always
  type: bool
nrestarts:
  description: The unit's C(NRestarts) after the reset, right before the start (the gate's baseline); its counter now
    when nothing was started.
  returned: always
  type: int
  sample: 0
before:
  description: C(ActiveState), C(SubState), C(NRestarts) and C(Result) of the unit before anything ran.
  returned: always
  type: dict
show:
  description: The same properties at the end of the wait (O(wait_s)); before, when there was no wait.
  returned: always
  type: dict
commands:
  description: The C(systemctl) commands run, each with C(argv), C(rc) and C(stderr); on failure too.
  returned: always
  type: list
  elements: dict
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.systemd import UNIT_RUN_ARGUMENT_SPEC, UnitRun, UnitRunError, exit_or_fail


def main():
    module = AnsibleModule(argument_spec=UNIT_RUN_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    worker = UnitRun.for_module(module)
    exit_or_fail(module, lambda: worker.run(p['unit'], p['state'], p['enabled'], p['daemon_reload'], p['wait_s'],
                                            journal_lines=p['journal_lines'], check_mode=module.check_mode), UnitRunError)


if __name__ == '__main__':
    main()
