#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: rollout_journal
short_description: Open, advance, and close the fleet rollout's journal on the controller
version_added: "0.2.0"
description:
  - The rollout's memory and its decisions, on the controller. The journal lives in
    C(<report_dir>/journal.db) (SQLite, one row per host); each call applies one decision in one
    transaction under an exclusive lock (the hosts of a batch call it at the same time).
    O(action=record), O(action=step) and O(action=admit) read and write only the run-level fields
    and the host's own record, so that their cost does not grow with the fleet; O(action=open) and
    O(action=close) read and write the whole journal and write C(<report_dir>/journal.json), a full
    snapshot of it. In check mode everything goes to C(<report_dir>/preview/) and the real journal
    is not touched.
  - A C(journal.json) written before C(journal.db) existed (journal version 2) is imported by the
    next O(action=open); one that cannot be used is refused naming the file and the remedy.
  - O(action=open) (once, after preflight) starts a run, or resumes an interrupted one when the hosts'
    deployment contracts give the same fingerprint (variants, images and digests, revisions, arguments);
    an interrupted journal with another fingerprint is closed as C(abandoned), archived as
    C(rollout-<id>.json) and C(.md), and a new run starts. Hosts whose O(failure_var) fact is set are
    recorded as C(excluded) (they count against the failure budget); the run halts at once when fewer
    than O(min_healthy) hosts passed or the budget is already spent.
  - O(action=admit) (before staging and before each host's restart) answers whether the host may
    still be touched. When more hosts have failed than O(max_failed), the rollout halts and the host
    is recorded C(not_reached). Its C(verdict) says what the restart entry does next; with
    O(stage_only) an admitted host is recorded C(stage_only), and in check mode one whose deployment
    still has parts only staging resolves (O(unresolved)) is recorded C(would_restart), in the same
    call (each record in its own transaction, after the admit's).
  - O(action=record) records one phase transition of one host (see C(docs/rollout.md), "Phases of a
    host"); a transition the state machine does not allow fails the task. C(restarting) and
    C(serving_new)/C(rolled_back) take the controller's clock for the host's unavailability.
  - O(action=step) records one step inside the host's restart (C(stopped), C(started),
    C(rollback_restored), C(rollback_started)) before the next step begins.
  - O(action=read) returns the live journal, in the format of C(journal.json).
  - O(action=close) closes the run (C(completed), C(completed with failures), C(halted) or
    C(aborted)), writes C(rollout-<id>.json) and C(rollout-<id>.md) and returns one summary line per host.
  - An action plugin; the decisions are the functions of C(plugins/module_utils/rollout.py).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [open, record, step, admit, close, read]
  report_dir:
    description: Directory on the controller for the journal and the reports.
    type: path
    required: true
  host:
    description: The host a O(action=record) or O(action=admit) is about.
    type: str
    default: the task's inventory_hostname
  hosts:
    description: O(action=open) only, the hosts of the run (every host of the play, failed ones included).
    type: list
    elements: str
    default: []
  contract_var:
    description: O(action=open) only, the host fact holding a host's deployment contract.
    type: str
    default: rollout_deployment
  failure_var:
    description: O(action=open) only, the host fact set when a host failed preflight (a message or a dict with C(message)).
    type: str
    default: rollout_preflight_failure
  current_var:
    description: O(action=open) only, the host fact holding what the host serves now (its rollout_state_file), shown for hosts
      that are not restarted.
    type: str
    default: rollout_serving
  min_healthy:
    description: O(action=open) only, the run halts before anything changes when fewer hosts passed preflight.
    type: int
    default: 1
  max_failed:
    description: Fleet-wide failure budget; the rollout halts once more hosts than this have failed.
    type: int
    default: 0
  phase:
    description: O(action=record) only, the host's new phase.
    type: str
  step:
    description: O(action=step) only, the step of the host's restart just done.
    type: str
  data:
    description:
      - O(action=record) only. May hold C(message), C(before), C(after) (what the host served and serves),
        C(gate), C(trial), C(staged), C(t_stop), C(t_ready).
    type: dict
    default: {}
  aborted_reason:
    description: O(action=close) only, why the run ended early, if it did.
    type: str
  stage_only:
    description: O(action=admit) only, this run only stages (C(rollout_stage_only)); an admitted host is
      recorded C(stage_only) and the verdict is C(stage_only).
    type: bool
    default: false
    version_added: "0.2.0"
  unresolved:
    description: O(action=admit) only, what the deployment contract cannot know before staging (its
      C(unresolved)); in check mode a non-empty list records an admitted host C(would_restart) with the
      message C(would restart <the list>), and the verdict is C(preview).
    type: list
    elements: str
    default: []
    version_added: "0.2.0"
notes:
  - Supports check mode (it writes under C(<report_dir>/preview/) only).
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Open the rollout
  inkling.fleet.rollout_journal:
    action: open
    report_dir: /var/lib/rollouts
    hosts: "{{ ansible_play_hosts_all }}"
    max_failed: 1
  run_once: true

- name: May this host still be touched
  inkling.fleet.rollout_journal:
    action: admit
    report_dir: /var/lib/rollouts
    max_failed: 1
  register: admission

- name: Record the drain
  inkling.fleet.rollout_journal:
    action: record
    report_dir: /var/lib/rollouts
    phase: draining
'''

RETURN = r'''
id:
  description: The rollout's id (open, close).
  returned: when action is open or close
  type: str
  sample: 20261201T101500Z
resumed:
  description: The run resumes an interrupted rollout (open).
  returned: when action is open
  type: bool
abandoned:
  description: Id of an interrupted rollout closed as abandoned (open), else null.
  returned: when action is open
  type: str
admitted:
  description: The host may be touched (admit).
  returned: when action is admit
  type: bool
verdict:
  description: What to do with the host after admit (admit), C(halt) (not admitted), C(stage_only) or
    C(preview) (recorded in this call), or C(go).
  returned: when action is admit
  type: str
  sample: go
  version_added: "0.2.0"
announce:
  description: This host is the first to find the rollout halted; print the halt once (admit).
  returned: when action is admit
  type: bool
halted:
  description: The rollout is halted.
  returned: when action is open or admit
  type: bool
halt_reason:
  description: Why it halted.
  returned: when action is open, admit or close
  type: str
status:
  description: The run's final status (close).
  returned: when action is close
  type: str
  sample: completed with failures
summary:
  description: One line per host, then the halt or abort reason (close).
  returned: when action is close
  type: list
  elements: str
report:
  description: Path of the Markdown report (close).
  returned: when action is close
  type: str
report_json:
  description: Path of the JSON report (close).
  returned: when action is close
  type: str
  version_added: "0.2.0"
rollout_failed:
  description: The status is anything but C(completed) (close).
  returned: when action is close
  type: bool
failed_hosts:
  description: Hosts that failed, in any phase (close).
  returned: when action is close
  type: list
  elements: str
journal_path:
  description: The journal's database (C(journal.db); C(journal.json) beside it is its snapshot at open and close).
  returned: always
  type: str
journal:
  description: The live journal, in the format of C(journal.json) (read).
  returned: when action is read
  type: dict
'''
