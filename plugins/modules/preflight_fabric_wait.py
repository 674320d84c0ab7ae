#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: preflight_fabric_wait
short_description: Wait, bounded, for the GPUs' fabric registration and show one line per round
version_added: "0.2.0"
description:
  - Polls the GPUs' fabric state with M(inkling.fleet.nvidia_gpu_info) every O(poll_s) seconds until no GPU
    is C(In Progress) or C(Not Started), or until O(wait_s) seconds have passed (the last poll falls at
    O(wait_s) exactly). Every round prints one line on the controller, for example
    C(gpu-node-01 - fabric registration 3 of 8 GPUs after 20s of 120s).
  - Running out of time is not a failure of this module; the preflight checks run afterwards report the
    fabric state with the time waited. It fails only on bad arguments.
  - An action plugin. The loop runs on the controller, each poll runs M(inkling.fleet.nvidia_gpu_info) on
    the host. The decisions (when to poll, what counts as registered) are
    C(plugins/module_utils/preflight_checks.py) functions.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  nvidia_smi_path:
    description: The nvidia-smi binary (name on C(PATH) or absolute path).
    type: str
    default: nvidia-smi
  wait_s:
    description: Longest wait in seconds.
    type: int
    default: 120
  poll_s:
    description: Seconds between polls (at least 1).
    type: int
    default: 10
seealso:
  - module: inkling.fleet.nvidia_gpu_info
  - module: inkling.fleet.preflight_evaluate
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Wait for fabric registration
  inkling.fleet.preflight_fabric_wait:
    wait_s: 120
    poll_s: 10
  register: fabric_wait
'''

RETURN = r'''
waited_s:
  description: Seconds from the start of the wait to the last poll.
  returned: always
  type: int
  sample: 120
rounds:
  description: Polls made.
  returned: always
  type: int
  sample: 12
registered:
  description: GPUs whose fabric state was C(Completed) at the last poll (null when no poll answered).
  returned: always
  type: int
  sample: 8
total:
  description: GPUs seen at the last poll (null when no poll answered).
  returned: always
  type: int
  sample: 8
complete:
  description: No GPU was still registering at the last poll.
  returned: always
  type: bool
  sample: true
error:
  description: Why the wait stopped early (nvidia-smi failed during the wait), else null.
  returned: always
  type: str
  sample: null
'''
