#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_peer_reset
short_description: End what a killed run of the peer fan-out left on a host (copy job, rsync daemon, their files)
version_added: "0.2.0"
description:
  - 'The C(peer) source of the C(inkling.fleet.hf_cache) role runs a copy job (M(inkling.fleet.hf_peer_copy), async)
    and an rsync daemon (a transient systemd unit) on every host, and stops both when staging ends, also on
    failure. A run that is killed (the controller died, Ctrl-C twice) cannot: this module, run at the start of
    the next peer staging, ends them.'
  - 'The copy job of the killed run is found through O(pid_file) (written by the job: its process id and process
    group); it is ended (its process group: the async wrapper, the job, its rsync) only when that process still
    runs a C(hf_peer_copy) module, so a reused process id is never signalled. Then O(unit) is stopped when it is
    loaded, and O(remove) (the daemon''s configuration and secrets, the jobs'' runtime directory) removed.'
  - Changes nothing when nothing was left; supports check mode (says what it would end).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit:
    description: The rsync daemon's transient unit, without C(.service).
    type: str
    required: true
  pid_file:
    description: The copy job's pid file (JSON with C(pid) and C(pgid)).
    type: path
    required: true
  remove:
    description: Files and directories a killed run left (removed after the unit stopped).
    type: list
    elements: path
    default: []
  kill_timeout_s:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 5
seealso:
  - module: inkling.fleet.hf_peer_copy
'''

EXAMPLES = r'''
- name: End what a killed run left
  inkling.fleet.hf_peer_reset:
    unit: inkling-hf-rsyncd
    pid_file: /run/inkling-hf-peer-copy.pid
    remove: [/run/inkling-hf-rsyncd.conf, /run/inkling-hf-rsyncd.secrets, /run/inkling-hf-cache]
'''

RETURN = r'''
killed:
  description: Process ids of the killed run's copy job that were ended (or would be, in check mode).
  returned: always
  type: list
  elements: int
stopped:
  description: True when the daemon's unit was stopped (or would be).
  returned: always
  type: bool
removed:
  description: Paths removed (or that would be).
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_daemon


def main():
    module = AnsibleModule(argument_spec=hf_peer_daemon.RESET_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    module.exit_json(**hf_peer_daemon.reset(module, p['unit'], p['pid_file'], p['remove'], p['kill_timeout_s']))


if __name__ == '__main__':
    main()
