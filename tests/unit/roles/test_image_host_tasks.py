# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The image role's host changes (roles/image/tasks/host.yml: one image_prune run) by ansible-playbook on
localhost against the fake podman of test_image_modules: the mirror drop-in is the role's template rendered
on the controller, the auth file root-only with the credentials hidden from the output, the record written
when the image is here, and a second run changes nothing (also in --check --diff)."""

import json
import os
import stat
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SECRET = 'host-tasks-secret-9431'
REPO = 'registry.example.com:5000/inkling/vllm'
D2 = 'sha256:' + '2' * 64
# podman as the module asks it: one image of the repository (the pinned one), no container
FAKE_PODMAN = '''#!%s
import json, sys
if sys.argv[1:2] == ['images']:
    print(json.dumps([{'Id': 'b' * 64, 'Digest': %r, 'RepoDigests': [%r], 'Names': [%r], 'Created': 2}]))
elif sys.argv[1:3] == ['ps', '--all']:
    print('[]')
else:
    sys.exit(125)
'''


def fake_podman(tmp_path):
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    path = bindir / 'podman'
    path.write_text(FAKE_PODMAN % (sys.executable, D2, REPO + '@' + D2, REPO + '@' + D2))
    os.chmod(str(path), 0o755)
    return str(bindir)


def run_play(tmp_path, podman_dir, extra_args=()):
    plan = {'repository': REPO, 'digest': D2, 'pinned_reference': REPO + '@' + D2, 'present': True,
            'recorded': {}, 'previous': None,
            'record': {'reference': REPO + ':v2', 'digest': D2, 'pinned_reference': REPO + '@' + D2,
                       'previous': None, 'source': 'variant'}}
    play = [{'name': 'host.yml', 'hosts': 'localhost', 'gather_facts': False,
             'vars': {'__image_plan': plan, '__image_fetch_needed': False, '__image_auth_managed': True,
                      'image_variant': {'name': 'x', 'image': {'reference': REPO + ':v2'}},
                      'image_registry_auth': [{'registry': 'registry.example.com:5000', 'username': 'robot',
                                               'password': SECRET}],
                      'image_auth_file': str(tmp_path / 'etc' / 'registry-auth.json'),
                      'image_registries_conf_mirror': [{'prefix': 'quay.io', 'mirrors': ['mirror.example/quay']}],
                      'image_registries_conf_dropin': str(tmp_path / 'conf.d' / '50-inkling-mirror.conf'),
                      'image_record_path': str(tmp_path / 'image' / 'resolved.json')},
             'tasks': [{'name': 'Host',
                        'ansible.builtin.include_role': {'name': 'inkling.fleet.image', 'tasks_from': 'host'}}]}]
    path = tmp_path / 'play.yml'
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCALHOST_WARNING='false', PATH=podman_dir + os.pathsep + os.environ['PATH'])
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
            '-e', 'ansible_python_interpreter=' + sys.executable, str(path)] + list(extra_args)
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason='the role writes its files as root:root')
def test_host_changes_in_one_run_then_none(tmp_path):
    (tmp_path / 'conf.d').mkdir()
    bindir = fake_podman(tmp_path)
    out = run_play(tmp_path, bindir)
    assert 'changed=1' in out, out
    dropin = (tmp_path / 'conf.d' / '50-inkling-mirror.conf').read_text()
    assert dropin.startswith('# Ansible managed\n') and 'prefix = "quay.io"' in dropin
    assert 'location = "mirror.example/quay"' in dropin
    auth = tmp_path / 'etc' / 'registry-auth.json'
    assert stat.S_IMODE(os.stat(str(auth)).st_mode) == 0o600
    assert list(json.loads(auth.read_text())['auths']) == ['registry.example.com:5000']
    assert json.loads((tmp_path / 'image' / 'resolved.json').read_text())['digest'] == D2
    out = run_play(tmp_path, bindir, ['--check', '--diff', '-v'])
    assert 'changed=0' in out and SECRET not in out, out
    out = run_play(tmp_path, bindir, ['-v'])
    assert 'changed=0' in out and SECRET not in out, out
