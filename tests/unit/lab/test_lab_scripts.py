# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Tests of the lab's own glue: lab/lab.sh, lab/scripts/*.sh, inventory/lab/.

They need bash, openssl and the project's virtualenv (ansible), as scripts/setup.sh installs
them; a committed file that is missing is a failure, not a skip. The running lab's shared
services are checked by tests/lab (after `lab/lab.sh up --services-only`), the lab's host
platform by the molecule scenarios (lab/playbooks/prepare-hosts.yml asserts it).
"""

import json
import os
import shutil
import stat
import subprocess

import yaml

from inkling_test_helpers import needs_program

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
LAB = os.path.join(REPO, 'lab')
INVENTORY = os.path.join(REPO, 'inventory', 'lab')
VENV_BIN = os.path.join(REPO, '.venv', 'bin')
ENV = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get('PATH', ''),
           CONTAINERS_CONF=os.path.join(LAB, 'conf', 'containers.conf'),
           ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))


def load_yaml(*parts):
    with open(os.path.join(REPO, *parts), encoding='utf-8') as f:
        return yaml.safe_load(f)


def lib_value(expr):
    """Evaluate a shell expression after sourcing lab/scripts/lib.sh."""
    out = subprocess.run(['bash', '-c', '. "$1"; echo ' + expr, 'lib', os.path.join(LAB, 'scripts', 'lib.sh')],
                         env=ENV, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def inventory_hosts(group):
    """Hosts below GROUP in inventory/lab/hosts.yml, recursively."""
    def walk(node):
        node = node or {}
        hosts = list((node.get('hosts') or {}).keys())
        for child in (node.get('children') or {}).values():
            hosts.extend(walk(child))
        return hosts
    return walk(load_yaml('inventory', 'lab', 'hosts.yml')[group])


def test_lab_hosts_are_the_inventory_hosts():
    assert lib_value('"${LAB_HOSTS[@]}"').split() == inventory_hosts('inkling_fleet')


def test_inventory_groups_and_gpu_profiles():
    fleet = load_yaml('inventory', 'lab', 'hosts.yml')['inkling_fleet']
    # reached as a real fleet: SSH (lab/scripts/ssh.sh's config) as an account that becomes root
    assert fleet['vars']['ansible_connection'] == 'ssh'
    assert '/lab/.state/ssh/config' in fleet['vars']['ansible_ssh_common_args']
    shared = load_yaml('inventory', 'lab', 'group_vars', 'inkling_fleet.yml')
    assert shared['ansible_become'] is True and shared['ansible_ssh_pipelining'] is True
    assert 'ControlPersist' in shared['ansible_ssh_args']
    groups = fleet['children']
    assert set(groups) == {'gpu_h200', 'gpu_b200'}
    want = {'gpu_h200': 'h200-8', 'gpu_b200': 'b200-8'}
    for group, profile in want.items():
        assert load_yaml('inventory', 'lab', 'group_vars', group + '.yml')['lab_gpu_profile'] == profile
    profiles = os.path.join(LAB, 'nvidia-smi', 'profiles')
    for profile in want.values():
        assert os.path.isfile(os.path.join(profiles, profile + '.json'))


def test_every_variant_runs_the_standin_in_the_lab():
    """A variant missing from the overrides would make the lab pull a real multi-GB image."""
    table_file = os.path.join(REPO, 'data', 'variants.yml')
    with open(table_file, encoding='utf-8') as f:
        table = yaml.safe_load(f)['variants']
    overrides = load_yaml('inventory', 'lab', 'group_vars', 'all', 'lab.yml')['inkling_variant_overrides']
    assert sorted(overrides) == sorted(table)
    for name, override in overrides.items():
        assert 'lab_standin_image' in override['image'], name
        assert 'lab_model' in override['model'], name


def test_registry_credentials_are_read_from_the_inventory():
    settings = load_yaml('inventory', 'lab', 'group_vars', 'all', 'lab.yml')
    assert lib_value('"$(lab_setting lab_registry_username)"') == settings['lab_registry_username']
    assert lib_value('"$(lab_setting lab_registry_password)"') == settings['lab_registry_password']
    bad = subprocess.run(['bash', '-c', '. "$1"; lab_setting no_such_key', 'lib', os.path.join(LAB, 'scripts', 'lib.sh')],
                         env=ENV, capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and 'no_such_key' in bad.stderr


def openssl(*args):
    return subprocess.run(['openssl'] + list(args), check=True, capture_output=True, text=True).stdout


@needs_program('openssl')
def test_pki_makes_a_ca_and_a_registry_certificate_once(tmp_path):
    env = dict(ENV, LAB_STATE=str(tmp_path))
    subprocess.run([os.path.join(LAB, 'scripts', 'pki.sh')], env=env, check=True, capture_output=True)
    pki = tmp_path / 'pki'
    openssl('verify', '-CAfile', str(pki / 'ca.crt'), str(pki / 'registry.crt'))
    text = openssl('x509', '-noout', '-text', '-in', str(pki / 'registry.crt'))
    assert 'DNS:lab-registry' in text and 'IP Address:127.0.0.1' in text
    assert 'TLS Web Server Authentication' in text
    for key in ('ca.key', 'registry.key'):
        assert stat.S_IMODE(os.stat(pki / key).st_mode) == 0o600
    for name in ('127.0.0.1:5000', 'lab-registry:5000'):
        assert (pki / 'certs.d' / name / 'ca.crt').read_bytes() == (pki / 'ca.crt').read_bytes()
    before = openssl('x509', '-noout', '-fingerprint', '-sha256', '-in', str(pki / 'registry.crt'))
    subprocess.run([os.path.join(LAB, 'scripts', 'pki.sh')], env=env, check=True, capture_output=True)
    assert openssl('x509', '-noout', '-fingerprint', '-sha256', '-in', str(pki / 'registry.crt')) == before
    # A certificate the CA did not sign is replaced.
    (pki / 'ca.crt').write_bytes((pki / 'registry.crt').read_bytes())
    subprocess.run([os.path.join(LAB, 'scripts', 'pki.sh')], env=env, check=True, capture_output=True)
    openssl('verify', '-CAfile', str(pki / 'ca.crt'), str(pki / 'registry.crt'))
    assert openssl('x509', '-noout', '-fingerprint', '-sha256', '-in', str(pki / 'registry.crt')) != before


def test_lab_sh_rejects_unknown_commands():
    for args in (['bogus'], [], ['up', '--bogus'], ['down', '--bogus']):
        res = subprocess.run([os.path.join(LAB, 'lab.sh')] + args, env=ENV, capture_output=True, text=True,
                             check=False)
        assert res.returncode == 2, args
        assert 'lab/lab.sh up' in res.stderr


def resolve_overrides(inventory_dir, out):
    """Template the lab inventory's variant overrides on the controller; return the process."""
    return subprocess.run(
        [os.path.join(VENV_BIN, 'ansible'), '-i', str(inventory_dir), 'localhost', '-m', 'ansible.builtin.copy',
         '-a', 'content={{ {"overrides": inkling_variant_overrides, "bad": lab_standin_bad_pinned_reference}'
               ' | to_json }} dest=%s' % out],
        env=ENV, cwd=REPO, capture_output=True, text=True, check=False)


def test_generated_values_feed_the_variant_overrides(tmp_path):
    inv = tmp_path / 'lab'
    shutil.copytree(INVENTORY, inv, ignore=shutil.ignore_patterns('generated.yml'))
    out = tmp_path / 'out.json'

    missing = resolve_overrides(inv, out)
    assert missing.returncode != 0
    assert 'run lab/lab.sh up' in missing.stdout + missing.stderr

    good = 'sha256:' + 'a' * 64
    bad = 'sha256:' + 'b' * 64
    (inv / 'group_vars' / 'all' / 'generated.yml').write_text(yaml.safe_dump({
        'lab_generated_standin_image': 'lab-registry:5000/inkling/vllm-standin',
        'lab_generated_standin_digest_lab': good,
        'lab_generated_standin_digest_bad': bad,
        'lab_generated_model_revision': 'c' * 40,
        'lab_generated_model_size_bytes': 4205586,
    }))
    res = resolve_overrides(inv, out)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data['bad'] == 'lab-registry:5000/inkling/vllm-standin@' + bad
    for name, override in data['overrides'].items():
        assert override['image'] == {'reference': 'lab-registry:5000/inkling/vllm-standin:lab', 'digest': good}, name
        assert override['model'] == {'revision': 'c' * 40, 'size_bytes': 4205586}, name


def test_prepare_playbook_syntax():
    res = subprocess.run([os.path.join(VENV_BIN, 'ansible-playbook'), '--syntax-check', '-i', INVENTORY,
                          os.path.join(LAB, 'playbooks', 'prepare-hosts.yml')],
                         env=ENV, cwd=REPO, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
