#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_progress
short_description: Wait a while for a background hub download and report its progress
version_added: "0.1.0"
description:
  - Reads the progress file that M(inkling.fleet.hf_download) or M(inkling.fleet.hf_peer_copy) writes,
    waiting up to O(wait_s) seconds or until the download ends, and returns the progress with a one-line message (bytes done of total,
    rate, time left, files), a one-shot look. The C(inkling.fleet.hf_cache) role follows its jobs with
    M(inkling.fleet.hf_wait) instead, which prints the same line every round of one bounded loop.
  - Reports C(stalled) when the download made no progress for O(stall_timeout_s) seconds.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  progress_file:
    description: The progress file.
    type: path
    required: true
  wait_s:
    description: Longest time to wait before reporting.
    type: int
    default: 30
  stall_timeout_s:
    description: No progress for this long is reported as C(stalled).
    type: int
    default: 600
seealso:
  - module: inkling.fleet.hf_download
  - module: inkling.fleet.hf_peer_copy
  - module: inkling.fleet.hf_wait
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Report staging progress
  inkling.fleet.hf_progress:
    progress_file: "{{ plan.progress_file }}"
    wait_s: 30
  register: progress

- name: Show it
  ansible.builtin.debug:
    msg: "{{ progress.msg }}"
'''

RETURN = r'''
finished:
  description: The downloader wrote its final state (done or failed).
  returned: always
  type: bool
stalled:
  description: No byte arrived for stall_timeout_s seconds.
  returned: always
  type: bool
progress:
  description: The progress file's content (state, bytes_done, bytes_total, rate_bps, eta_s, files_done,
    files_total, current_file, retries, updated).
  returned: always
  type: dict
msg:
  description: One line for the operator.
  returned: always
  type: str
'''

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import hf_wait


def main():
    module = AnsibleModule(argument_spec=hf_wait.PROGRESS_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    deadline = time.time() + max(p['wait_s'], 0)
    prog = None
    while True:
        prog = hc.read_json(p['progress_file'])
        if prog and prog.get('state') in ('done', 'failed'):
            break
        if time.time() >= deadline:
            break
        time.sleep(min(1.0, max(deadline - time.time(), 0)))
    if not prog:
        module.exit_json(changed=False, finished=False, stalled=False, progress={},
                         msg='waiting for the downloader to start (%s)' % p['progress_file'])
    stalled = prog.get('state') == 'running' and (prog.get('seconds_since_progress') or 0) >= p['stall_timeout_s']
    msg = hf_wait.progress_line(prog, p['stall_timeout_s'])
    module.exit_json(changed=False, finished=prog.get('state') in ('done', 'failed'), stalled=stalled,
                     progress=prog, msg=msg)


if __name__ == '__main__':
    main()
