# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""inkling.fleet.rollout_journal run by ansible-playbook (local connection), as the rollout
playbook runs it: open with hosts' contracts and preflight failures read from their facts,
admit and record from parallel hosts under the lock, close with reports; a corrupt journal
refused and left untouched; check mode writing only under preview/."""

import json
import os
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
        __rollout_preflight_failure: {{message: "GPU 7 missing"}}
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
        phases=('staged', 'draining', 'restarting', 'serving_new', 'done')):
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
    proc, reports = run(tmp_path, hosts=['h1'], walk="{{ item != 'draining' }}")
    assert proc.returncode == 2
    assert 'rollout journal: h1: staged -> restarting is not a transition of the rollout' in proc.stdout


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
