#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: unit_restore
short_description: Put a host's previous service unit back, or take a first deployment's away, in one call
version_added: "0.2.0"
description:
  - The one restore operation of the rollout, for a host held back before its stop (its running server is left
    alone) and for a rollback after a failed restart or gate (the caller then restarts the restored unit).
  - When O(backup) exists, its content is written over O(path) (a temporary file in the same directory, then a
    rename), only when it differs. Neither file is followed through a link.
  - When there is no backup (a first deployment), O(path) is removed, after C(systemctl stop) of O(unit) when
    O(stop_removed) is true. When the stop fails and the unit is still active, the module fails and leaves the
    file in place; a unit that is not active (unknown, already stopped) is removed anyway.
  - With O(keep), an existing O(path) is the unit to keep (a replica member whose unit did not change).
  - Then C(systemctl daemon-reload) when a file changed (a failure fails the module), and always
    C(systemctl reset-failed) O(unit), so that the start limit of the failed attempts does not refuse the next
    start (a failure there is reported, not raised).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit:
    description: The service unit, for example C(inkling-vllm.service).
    type: str
    required: true
  path:
    description: The installed unit file (the quadlet C(.container) or the C(.service)).
    type: path
    required: true
  backup:
    description: The previous content of the unit file, as the service role's M(inkling.fleet.quadlet_unit) kept it.
    type: path
    required: true
  keep:
    description: The unit file at O(path) stays as it is; only the reload and the reset run.
    type: bool
    default: false
  stop_removed:
    description: Stop O(unit) before its file is removed (a first deployment rolled back while it runs).
    type: bool
    default: false
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
seealso:
  - module: inkling.fleet.quadlet_unit
'''

EXAMPLES = r'''
- name: Put the previous unit file back (the running server is left alone)
  inkling.fleet.unit_restore:
    unit: inkling-vllm.service
    path: /etc/containers/systemd/inkling-vllm.container
    backup: /var/lib/inkling/service/inkling-vllm.container.previous

- name: Roll back, stopping and removing a first deployment's unit
  inkling.fleet.unit_restore:
    unit: inkling-vllm.service
    path: /etc/containers/systemd/inkling-vllm.container
    backup: /var/lib/inkling/service/inkling-vllm.container.previous
    stop_removed: true
  register: restore
'''

RETURN = r'''
outcome:
  description: C(restored) (the backup is the unit again), C(removed) (no backup; the unit file is gone) or
    C(kept) (O(keep)).
  returned: always
  type: str
  sample: restored
write:
  description: Whether the unit file was (in check mode, would be) written or removed.
  returned: always
  type: bool
stopped:
  description: Whether the unit was stopped (or found not active) before its file was removed.
  returned: always
  type: bool
commands:
  description: The C(systemctl) commands run, each with C(argv), C(rc) and C(stderr); on failure too.
  returned: always
  type: list
  elements: dict
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.systemd import exit_or_fail
from ansible_collections.inkling.fleet.plugins.module_utils.unit_restore import ARGUMENT_SPEC, UnitRestore, UnitRestoreError


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    worker = UnitRestore(module.run_command, module.get_bin_path('systemctl', required=True))
    # a failed restore reports only the commands that ran: it has no outcome to act on
    exit_or_fail(module, lambda: worker.restore(p['unit'], p['path'], p['backup'], p['keep'], p['stop_removed'],
                                                module.check_mode), (UnitRestoreError, OSError), keep=('commands',))


if __name__ == '__main__':
    main()
