# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The hf_cache role refuses, on the host and before it stages anything, a variant that runs
--trust-remote-code from a branch or tag (issue 36, finding 6): play 0 checks the table, and this is the role's
own defence for a play that includes it without play 0 (roles/hf_cache/tasks/validate.yml)."""

import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COMMIT = '89abcdef0123456789abcdef0123456789abcdef'


def validate(tmp_path, vllm_args, revision):
    play = [{
        'name': 'The hf_cache role input check', 'hosts': 'localhost', 'gather_facts': False,
        'vars': {'hf_cache_variant': {'name': 'sm90-patched', 'vllm_args': vllm_args,
                                      'model': {'repo_id': 'org/name', 'revision': revision}},
                 'hf_cache_dir': str(tmp_path / 'hub')},
        'tasks': [{'name': 'Validate', 'ansible.builtin.include_role': {'name': 'inkling.fleet.hf_cache',
                                                                        'tasks_from': 'validate'}},
                  {'name': 'Passed', 'ansible.builtin.debug': {'msg': 'VALIDATED'}}]}]
    path = tmp_path / 'play.yml'
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCALHOST_WARNING='false')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
            '-e', 'ansible_python_interpreter=' + sys.executable, str(path)]
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, check=False)
    return proc.returncode, ' '.join(proc.stdout.split())


@pytest.mark.parametrize('args,revision,ok', [
    (['--trust-remote-code'], 'main', False),
    (['--trust-remote-code=true'], 'v1.0', False),
    (['--trust-remote-code'], COMMIT, True),
    (['--tensor-parallel-size', '8'], 'main', True),       # no remote code: a branch is resolved once
])
def test_remote_code_from_a_branch_is_refused_before_staging(tmp_path, args, revision, ok):
    rc, out = validate(tmp_path, args, revision)
    if ok:
        assert rc == 0 and 'VALIDATED' in out, out
        return
    assert rc == 2 and 'VALIDATED' not in out, out
    assert "localhost: hf_cache inputs are invalid" in out
    assert ("entry 'sm90-patched': vllm_args have --trust-remote-code, which runs the Python code of org/name as "
            "the server, but model.revision is '%s', not a 40-hex commit" % revision) in out
    assert 'Remedy: pin model.revision' in out
