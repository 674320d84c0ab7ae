# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""roles/rollout/tasks/keep_serving.yml, run by ansible-playbook through drain.yml: the one rescue of
every failure before the stop. The host's previous unit file goes back (or stays, for a replica member
whose unit did not change), the phase is recorded with why (and whether the file went back), and the
host is left as it is: nothing after the rescue runs for it (issue 38)."""

import os

from inkling_test_helpers import run_local_play


PLAY = '''- name: A host whose drain hook fails
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
        max_failed: 1
      run_once: true

    - name: Walk to the drain
      inkling.fleet.rollout_journal:
        action: record
        report_dir: "{{{{ rollout_report_dir }}}}"
        phase: staged

    - name: Drain
      ansible.builtin.include_role:
        name: inkling.fleet.rollout
        tasks_from: drain
      vars:
        __rollout_restart: {{before: {{}}, reasons: [image], replica: {{}}, unit_kept: {kept}}}
        service_unit_name: inkling-test.service
        service_unit_path: {unit}
        service_unit_backup: {backup}
        rollout_drain_command: "false"
        rollout_drain_url: ""
        rollout_drain_wait_s: 0

    - name: Not reached by a host left as it is
      ansible.builtin.copy:
        content: reached
        dest: {marker}
        mode: "0644"

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


def run(tmp_path, kept=False, unit_is_link=False):
    reports = tmp_path / 'reports'
    unit, backup, marker = tmp_path / 'inkling.container', tmp_path / 'inkling.container.previous', tmp_path / 'reached'
    backup.write_text('previous\n')
    if unit_is_link:
        (tmp_path / 'elsewhere').write_text('new\n')
        unit.symlink_to(tmp_path / 'elsewhere')
    else:
        unit.write_text('new\n')
    # systemctl as a stand-in that logs its arguments (the restore's daemon-reload and reset-failed)
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'systemctl').write_text('#!/bin/sh\necho "$*" >> %s\n' % (tmp_path / 'systemctl.log'))
    (bindir / 'systemctl').chmod(0o755)
    play = PLAY.format(reports=reports, unit=unit, backup=backup, marker=marker, kept='true' if kept else 'false')
    journal = run_local_play(tmp_path, ['h1'], play, env={'PATH': str(bindir) + os.pathsep + os.environ['PATH']})
    return journal['hosts']['h1'], unit, marker, tmp_path / 'systemctl.log'


def test_a_failed_drain_puts_the_previous_unit_file_back_records_why_and_leaves_the_host(tmp_path):
    host, unit, marker, log = run(tmp_path)
    assert host['phase'] == 'drain_failed'
    assert host['message'].startswith('drain failed, host not stopped: ')
    assert 'was not put back' not in host['message']
    assert unit.read_text() == 'previous\n'
    assert 'daemon-reload' in log.read_text() and 'reset-failed inkling-test.service' in log.read_text()
    assert not marker.exists()


def test_a_replica_member_whose_unit_did_not_change_keeps_it(tmp_path):
    host, unit, marker, dummy = run(tmp_path, kept=True)
    assert host['phase'] == 'drain_failed'
    assert unit.read_text() == 'new\n'
    assert not marker.exists()


def test_a_refused_restore_is_in_the_recorded_message(tmp_path):
    host, unit, marker, dummy = run(tmp_path, unit_is_link=True)
    assert host['phase'] == 'drain_failed'
    assert 'the previous unit file was not put back' in host['message']
    assert 'a restart or reboot would start the new, ungated unit' in host['message']
    assert os.path.islink(unit)
    assert not marker.exists()
