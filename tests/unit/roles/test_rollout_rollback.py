# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""roles/rollout/tasks/rollback.yml, run by ansible-playbook after a failed restart: each way it can
end is a recorded phase, and each is broken on purpose here. The previous unit file goes back
(unit_restore), the unit is restarted (unit_run, against a stand-in systemctl) and gated (vllm_gate,
against the lab's vLLM stand-in on a loopback port), then undrained:

- rolled_back: all of it worked;
- rollback_undrain_failed: the undrain hook failed (the host serves, out of the load balancer);
- rollback_failed: the restart of the previous unit failed (not serving, not undrained);
- removed: a first deployment (no backup): the new unit is stopped and its file removed."""

import os

import pytest

from inkling_test_helpers import VllmStandin, run_local_play, standin_hub

REPO_ID = 'thinkingmachines/Inkling-NVFP4'
REV = '0123456789abcdef0123456789abcdef01234567'
MODEL = 'inkling'
UNIT = 'inkling-test.service'

PLAY = '''- name: A host whose restart failed is rolled back
  hosts: all
  gather_facts: false
  vars:
    rollout_report_dir: {reports}
  tasks:
    - name: Contract
      ansible.builtin.set_fact:
        rollout_deployment: {{variant: v1, image: reg/x:2, image_digest: null, revision: main, served_model_name: {model}}}

    - name: Open
      inkling.fleet.rollout_journal:
        action: open
        report_dir: "{{{{ rollout_report_dir }}}}"
        hosts: "{{{{ ansible_play_hosts_all }}}}"
        max_failed: 1
      run_once: true

    - name: Walk to the failed restart
      inkling.fleet.rollout_journal:
        action: record
        report_dir: "{{{{ rollout_report_dir }}}}"
        phase: "{{{{ item }}}}"
      loop: [staged, draining, restarting, rolling_back]

    - name: Roll back
      ansible.builtin.include_role:
        name: inkling.fleet.rollout
        tasks_from: rollback
      vars:
        __rollout_restart: {{before: {{served_model_name: {model}}}, replica: {{}}, replica_worker: false, unit_kept: false, resume: ""}}
        service_unit_name: {unit_name}
        service_unit_path: {unit}
        service_unit_backup: {backup}
        rollout_service_port: {port}
        rollout_gate_timeout_s: 60
        rollout_gate_poll_s: 0.2
        rollout_gate_progress_s: 5
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

# systemctl as a stand-in: logs its arguments, answers `show` as an active unit with the restart
# counter kept in a file (reset-failed sets it to 0; with $CRASH_ON_START a restart leaves it at 1,
# as a server that crashed once during start-up), and fails the verbs named in $FAIL_VERBS.
SYSTEMCTL = '''#!/bin/sh
echo "$*" >> {log}
case " $FAIL_VERBS " in *" $1 "*) echo "$1 refused" >&2; exit 1;; esac
case "$1" in
  reset-failed) echo 0 > {counter};;
  restart) [ -n "$CRASH_ON_START" ] && echo 1 > {counter};;
  show) printf 'ActiveState=active\\nSubState=running\\nNRestarts=%s\\nResult=success\\nLoadState=loaded\\n' "$(cat {counter})";;
esac
exit 0
'''


@pytest.fixture(scope='module')
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp('standin')
    standin = VllmStandin(standin_hub(root, REPO_ID, REV), root / 'cache',
                          {'STANDIN_TTFT_S': '0', 'STANDIN_TOKEN_S': '0.001'}, REPO_ID, MODEL)
    yield standin
    standin.stop()


def run(tmp_path, server, undrain='true', fail_verbs='', backup=True, crash_on_start=False):
    reports = tmp_path / 'reports'
    unit, backup_path = tmp_path / 'inkling.container', tmp_path / 'inkling.container.previous'
    unit.write_text('new\n')
    if backup:
        backup_path.write_text('previous\n')
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (tmp_path / 'nrestarts').write_text('2\n')
    (bindir / 'systemctl').write_text(SYSTEMCTL.format(log=tmp_path / 'systemctl.log', counter=tmp_path / 'nrestarts'))
    (bindir / 'systemctl').chmod(0o755)
    play = PLAY.format(reports=reports, unit=unit, backup=backup_path, port=server.port, undrain=undrain, model=MODEL,
                       unit_name=UNIT)
    journal = run_local_play(tmp_path, ['h1'], play, env={
        'PATH': str(bindir) + os.pathsep + os.environ['PATH'], 'FAIL_VERBS': fail_verbs,
        'CRASH_ON_START': '1' if crash_on_start else ''})
    log = (tmp_path / 'systemctl.log').read_text().splitlines()
    return journal['hosts']['h1'], unit, log


def test_a_rollback_that_serves_and_is_undrained_is_rolled_back(tmp_path, server):
    host, unit, log = run(tmp_path, server)
    assert host['phase'] == 'rolled_back', host
    assert unit.read_text() == 'previous\n'
    # the restore reloads and resets, then unit_run resets the start limit right before the restart
    assert log.index('daemon-reload') < log.index('restart %s' % UNIT)
    assert 'reset-failed %s' % UNIT in log[log.index('daemon-reload') + 1:log.index('restart %s' % UNIT)]


def test_a_failed_undrain_after_the_rollback_is_recorded(tmp_path, server):
    host, unit, log = run(tmp_path, server, undrain='false')
    assert host['phase'] == 'rollback_undrain_failed', host
    assert 'rolled back, but the undrain hook failed' in host['message']


def test_a_previous_unit_that_does_not_restart_is_a_failed_rollback(tmp_path, server):
    host, unit, log = run(tmp_path, server, fail_verbs='restart')
    assert host['phase'] == 'rollback_failed', host
    assert host['message'].startswith('rollback failed too: h1: systemctl restart %s failed' % UNIT)


def test_a_first_deployment_is_taken_back(tmp_path, server):
    host, unit, log = run(tmp_path, server, backup=False)
    assert host['phase'] == 'removed', host
    assert not unit.exists()
    assert 'stop %s' % UNIT in log and 'restart %s' % UNIT not in log


def test_the_rollback_gate_counts_restarts_from_the_restart_of_the_previous_unit(tmp_path, server):
    """The gate's baseline is unit_run's nrestarts, read right after the reset and before the restart:
    a previous unit that crashed once while starting fails its gate (taking the gate's first reading
    as the baseline would have let it pass)."""
    host, unit, log = run(tmp_path, server, crash_on_start=True)
    assert host['phase'] == 'rollback_failed', host
    assert 'restart' in host['message'].lower(), host['message']
