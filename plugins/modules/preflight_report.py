#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: preflight_report
short_description: Write a host's preflight report on the controller
version_added: "0.2.0"
description:
  - Writes O(content) to C(<report_dir>/<host>.json) on the controller, creating O(report_dir) (and its
    missing parents) with mode C(0700), or setting an existing one's mode to C(0700); the report file gets
    mode C(0600). Reports name hosts, their GPUs and failures, so they are the controller user's only.
  - The file is written to a new file renamed over the old one, so a link planted there is replaced, never
    followed.
  - Runs on the controller whatever host the task is for, as the controller user (it never uses become),
    and writes in check mode too (the report is an output, not a change to the host).
  - Reports C(changed) only when it made or changed the directory.
  - An action plugin.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  report_dir:
    description: The directory of the reports on the controller.
    type: path
    required: true
  host:
    description: The host the report is about (names the file).
    type: str
    default: the task's inventory_hostname
  content:
    description: The report (the role writes its JSON).
    type: str
    required: true
notes:
  - Supports check mode (it writes in check mode too).
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Write the report on the controller
  inkling.fleet.preflight_report:
    report_dir: /var/tmp/preflight
    content: "{{ preflight_report | to_nice_json(indent=2) }}\n"
'''

RETURN = r'''
path:
  description: The report file written.
  returned: success
  type: str
  sample: /var/tmp/preflight/gpu-node-01.json
'''
