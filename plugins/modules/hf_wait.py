#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_wait
short_description: Follow a background staging job until it ends, bounded, one progress line per round
version_added: "0.2.0"
description:
  - 'Follows a job started with C(async) and C(poll: 0) (M(inkling.fleet.hf_download) or
    M(inkling.fleet.hf_peer_copy)) until it ends or O(timeout_s) seconds have passed. Every O(interval_s)
    seconds it prints one line on the controller from the job''s progress file (host, bytes done of total,
    percent, rate, time left, files; the source for a peer copy; C([stalled for Ns]) when no byte arrived for
    O(stall_timeout_s) seconds), and a last line when the job ends. For example
    gpu-07: 212.4 GiB of 551.2 GiB (38.5%), 1.1 GiB/s, 0:05:08 left, file 61/170'
  - 'One loop, not one task per round: a wait of 48 hours at 30 s is 5,760 rounds of a Python loop, with no
    task file including itself (ansible-core 2.19 stopped such a file after 246 rounds with C(maximum recursion
    depth exceeded)).'
  - The job is polled every O(poll_s) seconds (every O(interval_s) when that is shorter), so its end is seen within
    O(poll_s) whatever O(interval_s) is; once its progress file says fewer seconds are left than O(poll_s), every
    second (its end is then seen within about a second, for a few polls more). Each poll is one command on the host (through C(become) when the play
    uses it), so a poll every second for hours would fill the host's auth log; keep O(poll_s) at a few seconds.
  - Fails when the job failed (with the job's own message, unless O(fail_on_job_failure=false)), when the
    wait ran out of time, or when the job's async status file is gone.
  - An action plugin. The loop runs on the controller; each poll runs one shell command on the host that
    prints the progress file and Ansible's async status file (no module transfer per round). The decisions
    (when to poll and print, what counts as ended or stalled) are C(plugins/module_utils/hf_wait.py) functions.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  job:
    description: The registered result of the async task (C(ansible_job_id), C(results_file)).
    type: dict
    required: true
  progress_file:
    description: The JSON progress file the job writes (state, bytes, rate, time left, source).
    type: str
    required: true
  interval_s:
    description: Seconds between two progress lines; V(0) prints one per poll (tests).
    type: float
    default: 30
  timeout_s:
    description: Longest wait in seconds.
    type: int
    default: 172800
  stall_timeout_s:
    description: A running job whose progress did not move for this long is shown as stalled (it keeps running).
    type: int
    default: 300
  poll_s:
    description: Seconds between two looks at the job (at most; a line falls due sooner when O(interval_s) is shorter).
    type: float
    default: 5.0
  unreachable_s:
    description: Seconds the host may fail to answer the polls (it died, its container was killed) before it is
      marked unreachable, so that the play goes on without it.
    type: int
    default: 60
  label:
    description: What the job is, for the messages (C(the download of gpu-07)).
    type: str
    default: the background job
  fail_on_job_failure:
    description: Fail when the job failed. V(false) returns the job's result in RV(job) for the caller to judge.
    type: bool
    default: true
seealso:
  - module: inkling.fleet.hf_download
  - module: inkling.fleet.hf_peer_copy
  - module: inkling.fleet.hf_progress
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Start the download in the background
  inkling.fleet.hf_download:
    plan_file: "{{ plan.plan_file }}"
    progress_file: "{{ plan.progress_file }}"
  async: 172800
  poll: 0
  register: download_job

- name: Follow it, one line every 30 s
  inkling.fleet.hf_wait:
    job: "{{ download_job }}"
    progress_file: "{{ plan.progress_file }}"
    interval_s: 30
    timeout_s: 172800
    label: the download
'''

RETURN = r'''
finished:
  description: The job ended (successfully or not).
  returned: always
  type: bool
  sample: true
job:
  description: The job's result once it ended (the module's return values, without C(invocation)), else empty.
  returned: always
  type: dict
timed_out:
  description: The wait ran out of time before the job ended.
  returned: always
  type: bool
  sample: false
rounds:
  description: Progress lines printed.
  returned: always
  type: int
  sample: 212
polls:
  description: Looks at the job.
  returned: always
  type: int
  sample: 6360
waited_s:
  description: Seconds from the start of the wait to the last poll.
  returned: always
  type: int
  sample: 6358
progress:
  description: The progress file's content at the last poll (empty before the job wrote it).
  returned: always
  type: dict
msg:
  description: The last progress line, or why the wait failed.
  returned: always
  type: str
'''
