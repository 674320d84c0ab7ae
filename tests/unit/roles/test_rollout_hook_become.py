# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's drain and undrain hooks (roles/rollout/tasks/hook.yml) and preflight's report run on the
controller without asking for sudo, wherever become comes from: the command line (-b), the play, or an
inventory variable (ansible_become: true for all, which the implicit localhost gets too). The become program
does not exist here, so any attempt to become on the controller fails the run. The become user is one the
controller does not run as (Ansible skips become to the same user, as for root running the tests): the
operator's controller account is not root either."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

INVENTORY = '''all:
  hosts:
    gpu-01:
      ansible_connection: local
      ansible_python_interpreter: {python}
  vars:
    # become on this host or on the controller fails: there is no such program
    ansible_become_exe: /nonexistent/sudo
    ansible_become_user: nobody
    {extra}
'''

PLAY = '''- name: Hooks and the preflight report on the controller
  hosts: gpu-01
  gather_facts: false
  become: {play_become}
  become_user: nobody
  tasks:
    - name: Run the drain hook as the rollout does
      ansible.builtin.include_role:
        name: inkling.fleet.rollout
        tasks_from: hook
      vars:
        __rollout_hook_name: drain
        __rollout_hook_command: "touch {marker}"
        __rollout_hook_url: ""

    - name: Write the preflight report as the role does
      ansible.builtin.include_role:
        name: inkling.fleet.preflight
        tasks_from: report
      vars:
        preflight_report_dir: "{reports}"
        __preflight_gpu_info: {{nvidia_gpu: {{}}}}
        __preflight_host_facts: {{host_facts: {{}}}}
        __preflight_variant: {{deployment: {{model: org/model, tensor_parallel_size: 8}}}}
        __preflight_eval: {{report: {{ok: true, failures: [], warnings: [], checks: []}}}}
'''


@pytest.mark.parametrize('where', ['command line -b', 'play', 'inventory'])
def test_controller_tasks_never_ask_for_sudo(tmp_path, where):
    marker = tmp_path / 'drained'
    (tmp_path / 'inventory.yml').write_text(INVENTORY.format(
        python=sys.executable, extra='ansible_become: true' if where == 'inventory' else ''))
    (tmp_path / 'play.yml').write_text(PLAY.format(
        play_become='true' if where == 'play' else 'false', marker=marker, reports=tmp_path / 'reports'))
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(tmp_path / 'inventory.yml'),
            str(tmp_path / 'play.yml')] + (['-b', '--become-user', 'nobody'] if where == 'command line -b' else [])
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert marker.exists(), out
    assert json.loads((tmp_path / 'reports' / 'gpu-01.json').read_text())['host'] == 'gpu-01'
