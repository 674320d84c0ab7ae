# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The real rollout playbook refuses bad settings in its first play, before anything runs on
a host, with one message per problem (inkling.fleet.rollout_validate)."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PLAYBOOK = os.path.join(REPO, 'playbooks', 'deploy_inkling.yml')

INVENTORY = '''all:
  children:
    inkling_fleet:
      hosts:
        gpu-01: {{}}
        gpu-02: {{}}
        gpu-03: {{{host3}}}
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
{pins}
{extra}
'''

# Every entry a host could be given runs --trust-remote-code: a fleet pins the commit (finding 6).
COMMIT = '0123456789abcdef0123456789abcdef01234567'
PINS = '''    inkling_variant_overrides_pins:
      sm90-patched: {{model: {{revision: "{c}"}}}}
      sm100: {{model: {{revision: "{c}"}}}}
      sm90-h100-2node: {{model: {{revision: "{c}"}}}}'''.format(c=COMMIT)


def run(tmp_path, *args, host3='', extra='', playbook=PLAYBOOK, env_extra=None, pins=PINS):
    inv = tmp_path / 'inventory.yml'
    inv.write_text(INVENTORY.format(python=sys.executable, host3=host3, extra=extra, pins=pins))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               XDG_STATE_HOME=str(tmp_path / 'state'), **(env_extra or {}))
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(inv), playbook] + list(args)
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, ' '.join(proc.stdout.split())


def assert_refused_before_any_host(proc, out):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'The rollout was not started; nothing ran on any host.' in out
    assert 'PLAY [Rollout | preflight every host' not in proc.stdout
    assert proc.stdout.count('fatal: [') == 1  # once, not once per host


def test_bad_variables_and_an_unresolvable_secret_are_listed_once_each(tmp_path):
    proc, out = run(tmp_path, '-e', 'rollout_max_failed_hosts=two', '-e', 'rollout_serial=0',
                    host3='image_registry_auth: [{registry: quay.io, username: robot, password: "{{ vault_quay }}"}]')
    assert_refused_before_any_host(proc, out)
    assert '3 problem(s)' in out
    assert "rollout_max_failed_hosts is 'two'; expected a whole number >= 0" in out
    assert "rollout_serial is '0': the batch '0' (Ansible reads 0 as \"every host at once\"" in out
    assert "image_registry_auth cannot be resolved: 'vault_quay' is undefined" in out
    assert 'Every secret the run needs must resolve before anything runs' in out
    assert '--vault-password-file (on gpu-03)' in out


def test_a_host_pattern_that_matches_nothing_is_refused(tmp_path):
    proc, out = run(tmp_path, '-e', 'rollout_hosts=gpu_h100')
    assert_refused_before_any_host(proc, out)
    assert "rollout_hosts 'gpu_h100' matches no host of the inventory" in out


def test_a_revision_with_spaces_is_refused_before_staging(tmp_path):
    proc, out = run(tmp_path, pins='',
                    extra='    inkling_variant_overrides: {sm90-patched: {model: {revision: "my branch"}}}')
    assert_refused_before_any_host(proc, out)
    assert "entry 'sm90-patched': model.revision must be a branch, tag or commit" in out
    assert "got 'my branch'" in out


def test_remote_code_from_a_branch_is_refused_for_every_candidate_entry(tmp_path):
    """The shipped table runs --trust-remote-code from revision main: whoever moves main (or a peer that
    reports another commit) would choose the code the servers run. Play 0 names each entry a host of this
    model and tensor parallel size could be given, once; entries of another model (Inkling-Small) are not asked."""
    proc, out = run(tmp_path, pins='', extra='    inkling_variant_overrides: {sm100: {model: {revision: "%s"}}}'
                    % COMMIT)
    assert_refused_before_any_host(proc, out)
    assert '2 problem(s)' in out
    for name in ('sm90-patched', 'sm90-h100-2node'):
        assert ("entry '%s': vllm_args have --trust-remote-code, which runs the Python code of "
                "thinkingmachines/Inkling-NVFP4 as the server, but model.revision is 'main', not a 40-hex commit" % name) in out
        assert 'inkling_variant_overrides: {%s: {model: {revision: <40-hex>}}}' % name in out
    assert "entry 'sm100'" not in out and 'small-tp2' not in out
    # a tag is no better than a branch; a 40-hex commit in upper case is not what the hub names
    proc, out = run(tmp_path, pins='', extra='    inkling_variant_overrides: {sm100: {model: {revision: "v1.0"}}, '
                    'sm90-patched: {model: {revision: "%s"}}}' % COMMIT.upper())
    assert_refused_before_any_host(proc, out)
    assert "entry 'sm100': vllm_args have --trust-remote-code" in out and "model.revision is 'v1.0'" in out
    assert "entry 'sm90-patched': vllm_args have --trust-remote-code" in out


@pytest.mark.parametrize('tags', [['--tags', 'restart'], ['--skip-tags', 'stage']])
def test_tags_are_refused(tmp_path, tags):
    proc, out = run(tmp_path, *tags)
    assert_refused_before_any_host(proc, out)
    assert 'are not supported by the rollout' in out


def test_a_misspelled_host_in_a_list_is_refused(tmp_path):
    """Ansible drops a name that matches nothing with a warning only: the run would cover one host and
    report completed."""
    proc, out = run(tmp_path, '-e', 'rollout_hosts=gpu-01,gpu-2')
    assert_refused_before_any_host(proc, out)
    assert "rollout_hosts 'gpu-01,gpu-2' names 'gpu-2', which matches no host or group of the inventory" in out


def test_rollout_hosts_from_the_inventory_is_refused_with_the_remedy(tmp_path):
    """The plays' host patterns see extra vars only: rollout_hosts in group_vars would be ignored without a word."""
    proc, out = run(tmp_path, extra='    rollout_hosts: gpu-01')
    assert_refused_before_any_host(proc, out)
    assert "rollout_hosts is 'gpu-01' in the inventory (group_vars or host_vars)" in out
    assert 'would run on \'inkling_fleet\'. Pass it on the command line: -e rollout_hosts=gpu-01' in out
    # the same value on the command line is what the plays use: accepted (no refusal about it)
    proc, out = run(tmp_path, '-e', 'rollout_hosts=gpu-01', '--check', extra='    rollout_hosts: gpu-01')
    assert 'in the inventory (group_vars or host_vars)' not in out
    assert 'matches no host or group' not in out


def test_the_preflight_playbook_checks_the_settings_first(tmp_path):
    """playbooks/preflight.yml used to say "skipping: no hosts matched" and exit 0 for a misspelled group."""
    proc, out = run(tmp_path, '-e', 'rollout_hosts=gpu_h20',
                    playbook=os.path.join(REPO, 'playbooks', 'preflight.yml'))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rollout_hosts 'gpu_h20' matches no host of the inventory" in out
    assert 'The rollout was not started; nothing ran on any host.' in out


def test_forks_below_the_largest_batch_is_warned(tmp_path):
    """The collection ships no ansible.cfg: a user gets Ansible's 5 forks while a batch may hold more hosts."""
    # 3 hosts: a canary, then the 2 others
    proc, _out = run(tmp_path, '-f', '1', '-e', '{"rollout_serial": [1, "100%"]}', '--check')
    said = ' '.join((proc.stdout + proc.stderr).split())
    assert 'forks is 1, below the largest restart batch (2 hosts)' in said, said
    # (enough forks: no warning; tests/unit/plugins/module_utils/test_rollout_validate.py)


def test_the_names_of_release_0_1_are_warned_once_and_a_conflict_is_refused(tmp_path):
    """The deployment variables were renamed in 0.2.0 (docs/variants.md): an old name still works, with
    one deprecation warning per name for the whole fleet; both names set to different values is refused."""
    proc, out = run(tmp_path, host3='preflight_model: org/other',
                    extra='    inkling_model: thinkingmachines/Inkling-NVFP4\n'
                          '    preflight_variant_overrides_site: {sm100: {priority: 11}}')
    assert_refused_before_any_host(proc, out)
    assert ('inkling_model and preflight_model (its old name) are both set, to different values. Remedy: keep only '
            'inkling_model (on gpu-03)') in out
    err = ' '.join(proc.stderr.split())   # Ansible prints deprecations on stderr
    assert err.count('preflight_variant_overrides_site (set for 3 host(s): gpu-01, gpu-02, gpu-03) is the old name '
                     'of inkling_variant_overrides_site; rename it in the inventory') == 1
    assert 'preflight_model (set for 1 host(s): gpu-03) is the old name of inkling_model' in err
    assert "removed from collection 'inkling.fleet' version 0.3.0" in err
