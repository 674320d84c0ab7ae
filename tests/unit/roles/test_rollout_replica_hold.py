# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""roles/rollout/tasks/replica_hold.yml, run by ansible-playbook: a replica member whose partner fell
out before the stop is held back, undrained, and recorded replica_held; when its undrain hook fails it
is recorded replica_held_undrain_failed, with the remedy in the report, not merely held back (issue 38)."""

import json

import pytest

from inkling_test_helpers import run_local_play


PLAY = '''- name: A replica of two, one member falls out before the stop
  hosts: all
  gather_facts: false
  vars:
    rollout_report_dir: {reports}
  tasks:
    - name: Contract
      ansible.builtin.set_fact:
        rollout_deployment: {{variant: v1, image: reg/x:1, image_digest: null, revision: main}}

    - name: Open
      inkling.fleet.rollout_journal:
        action: open
        report_dir: "{{{{ rollout_report_dir }}}}"
        hosts: "{{{{ ansible_play_hosts_all }}}}"
        max_failed: 2
      run_once: true

    - name: Walk to the drain
      inkling.fleet.rollout_journal:
        action: record
        report_dir: "{{{{ rollout_report_dir }}}}"
        phase: "{{{{ item }}}}"
      loop: [staged, draining]

    - name: m1 fails its drain
      inkling.fleet.rollout_journal:
        action: record
        report_dir: "{{{{ rollout_report_dir }}}}"
        phase: drain_failed
      when: inventory_hostname == 'm1'

    - name: m2 comes to the stop
      ansible.builtin.include_role:
        name: inkling.fleet.rollout
        tasks_from: replica_hold
      when: inventory_hostname == 'm2'
      vars:
        __rollout_restart: {{replica: {{name: r1, members: [m1, m2]}}, unit_kept: true}}
        service_unit_name: inkling-test-absent.service
        service_unit_path: {reports}/absent.container
        service_unit_backup: null
        rollout_undrain_command: "{undrain}"
        rollout_undrain_url: ""

- name: Report
  hosts: all
  gather_facts: false
  tasks:
    - name: Close
      inkling.fleet.rollout_journal:
        action: close
        report_dir: {reports}
      run_once: true
'''


def run(tmp_path, undrain):
    reports = tmp_path / 'reports'
    journal = run_local_play(tmp_path, ['m1', 'm2'], PLAY.format(reports=reports, undrain=undrain))
    reports_md = sorted(reports.glob('rollout-*.md'))
    assert len(reports_md) == 1
    return journal['hosts'], reports_md[0].read_text()


@pytest.mark.parametrize('undrain,phase', [('true', 'replica_held'), ('false', 'replica_held_undrain_failed')])
def test_a_held_back_member_is_recorded_with_what_its_undrain_did(tmp_path, undrain, phase):
    hosts, report = run(tmp_path, undrain)
    assert hosts['m1']['phase'] == 'drain_failed'
    assert hosts['m2']['phase'] == phase
    message = hosts['m2'].get('message') or json.dumps(hosts['m2'])
    assert 'replica r1: m1 did not get as far as the stop, so no member of the replica is stopped' in message
    if phase == 'replica_held_undrain_failed':
        assert 'the undrain hook failed' in message
        assert 'put it back into the load balancer by hand' in report
        assert 'NOT undrained' in report
    else:
        assert 'NOT undrained' not in report
