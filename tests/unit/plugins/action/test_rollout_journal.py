# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""inkling.fleet.rollout_journal run by ansible-playbook (local connection), as the rollout
playbook runs it: open with hosts' contracts and preflight failures read from their facts,
admit and record from parallel hosts under the lock, close with reports; a corrupt journal
refused and left untouched; check mode writing only under preview/."""

import json
import os
import socket
import stat
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

INVENTORY = '''all:
  hosts:
{hosts}
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
'''

PLAY = '''- name: A rollout in miniature
  hosts: all
  gather_facts: false
  vars:
    report_dir: {dir}
  tasks:
    - name: Contract or failure
      ansible.builtin.set_fact:
        rollout_deployment: {{variant: v1, image: reg/x:1, image_digest: null, revision: main}}
      when: inventory_hostname not in {failed}

    - name: Failure
      ansible.builtin.set_fact:
        rollout_preflight_failure: {{message: "GPU 7 missing"}}
      when: inventory_hostname in {failed}

    - name: Open
      inkling.fleet.rollout_journal:
        action: open
        report_dir: "{{{{ report_dir }}}}"
        hosts: "{{{{ ansible_play_hosts_all }}}}"
        max_failed: {budget}
      run_once: true
      register: opened

    - name: Show
      ansible.builtin.debug:
        msg: "OPEN: {{{{ opened.msg }}}}"
      run_once: true

    - name: Admit
      inkling.fleet.rollout_journal:
        action: admit
        report_dir: "{{{{ report_dir }}}}"
        max_failed: {budget}
      register: admitted

    - name: End the hosts not admitted
      ansible.builtin.meta: end_host
      when: not admitted.admitted

    - name: Walk
      inkling.fleet.rollout_journal:
        action: record
        report_dir: "{{{{ report_dir }}}}"
        phase: "{{{{ item }}}}"
      loop: {phases}
      when: "{walk}"

- name: Report
  hosts: all
  gather_facts: false
  tasks:
    - name: Close
      inkling.fleet.rollout_journal:
        action: close
        report_dir: {dir}
      run_once: true
      register: closed

    - name: Show
      ansible.builtin.debug:
        msg: "CLOSE: {{{{ closed.status }}}} {{{{ closed.summary | join(' // ') }}}}"
      run_once: true
'''


def run(tmp_path, hosts=('h1', 'h2', 'h3'), failed=(), budget=0, walk='true', check=False, journal=None,
        phases=('staged', 'draining', 'restarting', 'serving_new', 'done'), reports=None, popen=False):
    if reports is None:
        reports = tmp_path / 'reports'
        reports.mkdir(exist_ok=True)
    if journal is not None:
        (reports / 'journal.json').write_text(journal)
    inv = tmp_path / 'inventory.yml'
    inv.write_text(INVENTORY.format(hosts='\n'.join('    %s: {}' % h for h in hosts), python=sys.executable))
    play = tmp_path / 'play.yml'
    play.write_text(PLAY.format(dir=reports, failed=list(failed), budget=budget, walk=walk, phases=list(phases)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_STDOUT_CALLBACK='default', ANSIBLE_FORKS='8')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(inv), str(play)]
    if check:
        argv.append('--check')
    if popen:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True), reports
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, reports


def test_parallel_hosts_record_under_the_lock_and_the_report_is_written(tmp_path):
    proc, reports = run(tmp_path, hosts=['h%d' % i for i in range(8)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    journal = json.loads((reports / 'journal.json').read_text())
    assert journal['status'] == 'completed'
    assert sorted(journal['hosts']) == ['h%d' % i for i in range(8)]
    for rec in journal['hosts'].values():  # no lost update: every host has its six events
        assert [e['phase'] for e in rec['events']] == ['pending', 'staged', 'draining', 'restarting',
                                                       'serving_new', 'done']
    assert (reports / ('rollout-%s.md' % journal['id'])).exists()
    assert (reports / ('rollout-%s.json' % journal['id'])).exists()
    assert 'CLOSE: completed' in proc.stdout


def test_a_host_set_aside_with_budget_zero_stops_every_other_host(tmp_path):
    proc, reports = run(tmp_path, failed=['h2'], budget=0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    journal = json.loads((reports / 'journal.json').read_text())
    assert journal['status'] == 'halted'
    assert journal['hosts']['h2']['phase'] == 'excluded'
    assert journal['hosts']['h2']['message'] == 'GPU 7 missing'
    assert journal['hosts']['h1']['phase'] == journal['hosts']['h3']['phase'] == 'not_reached'
    assert all(len(rec.get('restarts', [])) == 0 for rec in journal['hosts'].values())


def test_an_illegal_transition_fails_the_task(tmp_path):
    proc, reports = run(tmp_path, hosts=['h1'], walk="{{ item != 'staged' }}")
    assert proc.returncode == 2
    assert 'rollout journal: h1: pending -> draining is not a transition of the rollout' in proc.stdout


@pytest.mark.parametrize('content,why', [
    ('{"id": "20261130T000000Z", "status": "runn', 'Unterminated string starting at: line 1 column 38 (char 37)'),
    ('[1, 2]\n', 'it holds JSON that is not an object'),
])
def test_a_corrupt_journal_is_refused_and_left_untouched(tmp_path, content, why):
    proc, reports = run(tmp_path, journal=content)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = ' '.join(proc.stdout.split())
    path = reports / 'journal.json'
    assert ('%s is not a rollout journal (a JSON object): %s. It was left untouched. Remedy: move it aside (it may '
            'hold the records of an interrupted rollout) and run again to start a new rollout.' % (path, why)) in out
    assert path.read_text() == content


def test_check_mode_writes_only_a_preview(tmp_path):
    before = '{"id": "OLD", "status": "completed", "hosts": {}}\n'
    proc, reports = run(tmp_path, check=True, journal=before, phases=['staged', 'would_restart'])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (reports / 'journal.json').read_text() == before
    preview = json.loads((reports / 'preview' / 'journal.json').read_text())
    assert preview['check_mode'] is True
    assert preview['status'] == 'completed'
    assert [rec['phase'] for rec in preview['hosts'].values()] == ['would_restart'] * 3
    report = (reports / 'preview' / ('preview-%s.md' % preview['id'])).read_text()
    assert '**Preview (check mode): nothing was changed.**' in report
    assert not list(reports.glob('rollout-*'))


# --- Hardening (issue 36, finding 12; docs/security.md) ---

def mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def test_reports_and_journal_are_private_and_name_their_controller(tmp_path):
    proc, reports = run(tmp_path, hosts=['h1'], reports=tmp_path / 'new' / 'reports', popen=True)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert mode(reports) == 0o700
    journal = json.loads((reports / 'journal.json').read_text())
    files = [reports / 'journal.json', reports / ('rollout-%s.json' % journal['id']),
             reports / ('rollout-%s.md' % journal['id']), reports / '.journal.lock']
    assert [mode(f) for f in files] == [0o600] * 4
    # the controller is this run's ansible-playbook
    assert journal['controller']['host'] == socket.gethostname() and journal['controller']['pid'] == proc.pid


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_kept(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('precious\n')
    reports = tmp_path / 'reports'
    reports.mkdir()
    os.symlink(str(victim), str(reports / '.journal.lock'))
    proc, dummy = run(tmp_path, hosts=['h1'])
    assert proc.returncode == 2, proc.stdout
    assert 'cannot use the report directory %s' % reports in ' '.join(proc.stdout.split())
    assert victim.read_text() == 'precious\n' and not (reports / 'journal.json').exists()


@pytest.mark.parametrize('journal,why', [
    ({'id': '../../escape', 'status': 'running', 'hosts': {}}, "id '../../escape' is not a run id"),
    ({'id': '20261204T100000Z', 'status': 'running', 'hosts': []}, 'hosts is a list, not an object'),
    ({'id': '20261204T100000Z', 'status': 'running', 'hosts': {'h1': {'events': 'x'}}},
     'hosts.h1.events is not a list'),
    ({'id': '20261204T100000Z', 'status': 'running', 'hosts': {'h1': {'phase': 'exploded'}}},
     "hosts.h1.phase 'exploded' is not a phase of the rollout"),
    ({'version': 99, 'id': '20261204T100000Z', 'status': 'running', 'hosts': {}}, 'this code reads journal version'),
])
def test_a_malformed_or_hostile_journal_is_refused_with_what_is_wrong(tmp_path, journal, why):
    text = json.dumps(journal) + '\n'
    proc, reports = run(tmp_path, journal=text)
    out = ' '.join(proc.stdout.split())
    assert proc.returncode == 2, out
    assert 'is not a rollout journal (a JSON object): ' in out and why in out, out
    assert 'Traceback' not in proc.stdout + proc.stderr
    assert (reports / 'journal.json').read_text() == text
    assert not (tmp_path / 'escape.md').exists() and not list(tmp_path.glob('*escape*'))


def ticks(pid):
    with open('/proc/%d/stat' % pid) as f:
        return int(f.read().rsplit(')', 1)[1].split()[19])


def test_a_second_rollout_is_refused_while_the_first_still_runs(tmp_path):
    first = subprocess.Popen(['sleep', '120'])
    try:
        running = {'version': 2, 'id': '20261204T100000Z', 'status': 'running', 'fingerprint': 'f' * 64,
                   'runs': [{'run': 1, 'started': '2026-12-04T10:00:00Z'}], 'hosts': {}, 'halted': False,
                   'halt_reason': '', 'notices': [],
                   'controller': {'host': socket.gethostname(), 'pid': first.pid, 'pid_start': ticks(first.pid)}}
        text = json.dumps(running) + '\n'
        proc, reports = run(tmp_path, journal=text)
        out = ' '.join(proc.stdout.split())
        assert proc.returncode == 2, out
        assert ('rollout 20261204T100000Z is still running from this controller (ansible-playbook pid %d'
                % first.pid) in out
        assert (reports / 'journal.json').read_text() == text
    finally:
        first.kill()
        first.wait()
    # once it is gone (a pid whose start time no longer matches), the next run goes on as before:
    # another deployment, so the interrupted one is closed as abandoned
    proc, reports = run(tmp_path, hosts=['h1'], journal=text)
    assert proc.returncode == 0, proc.stdout
    assert json.loads((reports / 'rollout-20261204T100000Z.json').read_text())['status'] == 'abandoned'
