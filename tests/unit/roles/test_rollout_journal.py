# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout journal on the controller (roles/rollout/tasks/journal_open.yml), run by ansible-playbook
on localhost: a new journal, an interrupted one resumed, and a corrupt one refused and left untouched."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAY = '''- name: Open the rollout journal
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Open it
      ansible.builtin.include_role:
        name: inkling.fleet.rollout
        tasks_from: journal_open
      vars:
        rollout_report_dir: {dir}
'''


def open_journal(tmp_path, content=None):
    reports = tmp_path / 'reports'
    reports.mkdir()
    if content is not None:
        (reports / 'journal.json').write_text(content)
    play = tmp_path / 'play.yml'
    play.write_text(PLAY.format(dir=reports))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_FORCE_COLOR='0',
               ANSIBLE_NOCOLOR='1', ANSIBLE_STDOUT_CALLBACK='default', ANSIBLE_CALLBACK_RESULT_FORMAT='json')
    bindir = os.path.dirname(sys.executable)
    proc = subprocess.run([os.path.join(bindir, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
                           '-e', 'ansible_python_interpreter=' + sys.executable, str(play)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, reports / 'journal.json'


@pytest.mark.parametrize('content,why', [
    ('{"id": "20261130T000000Z", "status": "runn', 'Unterminated string starting at: line 1 column 38 (char 37)'),
    ('[1, 2]\n', 'it holds JSON that is not an object'),
])
def test_a_corrupt_journal_is_refused_and_left_untouched(tmp_path, content, why):
    proc, path = open_journal(tmp_path, content)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = ' '.join((proc.stdout + proc.stderr).split())
    assert ('%s is not a rollout journal (a JSON object): %s. It was left untouched. Remedy: move it aside (it may '
            'hold the records of an interrupted rollout) and run again to start a new rollout.' % (path, why)) in out
    assert path.read_text() == content


def test_an_interrupted_rollout_is_resumed_with_its_records(tmp_path):
    before = {'id': '20261130T000000Z', 'status': 'running', 'started': '2026-11-30T00:00:00Z',
              'hosts': {'gpu-node-01': {'restarted': True}}, 'excluded': {}, 'halted': False, 'halt_reason': ''}
    proc, path = open_journal(tmp_path, json.dumps(before))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    journal = json.loads(path.read_text())
    assert 'Resuming interrupted rollout 20261130T000000Z' in proc.stdout
    assert journal == dict(before, resumed_at=journal['resumed_at'])
    assert len(journal['resumed_at']) == 1


def test_a_finished_or_missing_journal_starts_a_new_rollout(tmp_path):
    done = {'id': '20261130T000000Z', 'status': 'completed', 'hosts': {'gpu-node-01': {}}}
    proc, path = open_journal(tmp_path, json.dumps(done))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    journal = json.loads(path.read_text())
    assert 'Starting rollout %s' % journal['id'] in proc.stdout
    assert journal['id'] != done['id'] and journal['status'] == 'running' and journal['hosts'] == {}
    assert 'resumed_at' not in journal
