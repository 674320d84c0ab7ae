# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The hf_cache role's local check and installation (roles/hf_cache/tasks/check.yml, install.yml) run by
ansible-playbook on localhost, under the conditions stage.yml includes the install and stages under (the role's
vars/main.yml): a host whose staging virtual environment already has the pinned huggingface_hub includes no install
(no stat of its python: check.yml's module read the version; one module run on every host for both) and stages; a
host without it, in check mode, previews the install, finds no python and says that check mode stops there."""

import getpass
import grp
import os
import stat
import subprocess
import sys
import tarfile

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(REPO, 'roles', 'hf_cache')


def stage_file_when(name):
    """The `when` of the task ``name`` of stage.yml, as written."""
    with open(os.path.join(ROLE, 'tasks', 'stage.yml')) as f:
        return [t for t in yaml.safe_load(f) if t.get('name') == name][0]['when']


def fake_python(tmp_path):
    """An executable named python3.11: what the staging venv's bin/python resolves to (the module reads the
    version from that name; the staging python itself is not run by these tasks)."""
    base = tmp_path / 'base'
    base.mkdir()
    path = base / 'python3.11'
    path.write_text('#!/bin/sh\n')
    os.chmod(str(path), 0o755)
    return str(path)


def run_play(tmp_path, venv, check, rc=0):
    play = [{
        'name': 'The role installation check, then stage.yml\'s conditions',
        'hosts': 'localhost',
        'gather_facts': False,
        'vars': {'hf_cache_venv': venv, 'hf_cache_repo_id': 'org/name', 'hf_cache_revision': 'main',
                 'hf_cache_source': 'hub', 'hf_cache_dir': str(tmp_path / 'hub'),
                 'hf_cache_owner': getpass.getuser(), 'hf_cache_group': grp.getgrgid(os.getgid()).gr_name},
        'tasks': [
            {'name': 'Local check', 'ansible.builtin.include_role': {'name': 'inkling.fleet.hf_cache',
                                                                     'tasks_from': 'check', 'public': True}},
            {'name': 'Installation', 'ansible.builtin.include_role': {'name': 'inkling.fleet.hf_cache',
                                                                      'tasks_from': 'install', 'public': True},
             'when': stage_file_when('Install huggingface_hub on the host')},
            {'name': 'Stage', 'ansible.builtin.debug': {'msg': 'STAGE-RUNS'},
             'when': stage_file_when('Stage from the source')},
            {'name': 'Was the python stat run', 'ansible.builtin.debug': {
                'msg': "STAT-{{ 'RAN' if __hf_cache_python_stat is defined else 'SKIPPED' }}"}},
        ]}]
    path = tmp_path / 'play.yml'
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_FORCE_COLOR='0',
               ANSIBLE_NOCOLOR='1', ANSIBLE_LOCALHOST_WARNING='false')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
            '-e', 'ansible_python_interpreter=' + sys.executable, str(path)] + (['--check'] if check else [])
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, check=False)
    assert proc.returncode == rc, proc.stdout
    return ' '.join(proc.stdout.split())       # the callback wraps long messages


def test_an_installed_staging_python_is_not_stat_ed_and_the_host_stages(tmp_path):
    with open(os.path.join(ROLE, 'defaults', 'main.yml')) as f:
        pinned = yaml.safe_load(f)['hf_cache_huggingface_hub_version']
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    os.symlink(fake_python(tmp_path), str(venv / 'bin' / 'python'))
    (venv / 'pyvenv.cfg').write_text('home = %s\nversion = 3.11.2\n' % (tmp_path / 'base'))
    dist = venv / 'lib' / 'python3.11' / 'site-packages' / ('huggingface_hub-%s.dist-info' % pinned)
    dist.mkdir(parents=True)
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: huggingface_hub\nVersion: %s\n' % pinned)
    out = run_play(tmp_path, str(venv), check=False)
    assert 'STAT-SKIPPED' in out and 'STAGE-RUNS' in out, out
    assert 'the staging cannot be previewed' not in out


def test_another_version_in_the_staging_environment_is_replaced(tmp_path):
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    os.symlink(fake_python(tmp_path), str(venv / 'bin' / 'python'))
    (venv / 'pyvenv.cfg').write_text('home = %s\nversion = 3.11.2\n' % (tmp_path / 'base'))
    dist = venv / 'lib' / 'python3.11' / 'site-packages' / 'huggingface_hub-0.1.0.dist-info'
    dist.mkdir(parents=True)
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: huggingface_hub\nVersion: 0.1.0\n')
    out = run_play(tmp_path, str(venv), check=True)      # check mode: pip previews, installs nothing
    assert 'STAT-RAN' in out, out


def test_check_mode_without_the_staging_python_previews_the_install_and_stops(tmp_path):
    venv = str(tmp_path / 'absent')
    out = run_play(tmp_path, venv, check=True)
    assert 'STAT-RAN' in out and 'STAGE-RUNS' not in out, out
    assert 'check mode: %s would be created' % venv in out and 'the staging cannot be previewed' in out
    assert not os.path.exists(venv)


def test_a_staging_environment_whose_python_is_gone_stops_the_host_before_any_install(tmp_path):
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    os.symlink(str(tmp_path / 'removed-python3.11'), str(venv / 'bin' / 'python'))     # its base python was removed
    (venv / 'pyvenv.cfg').write_text('home = /usr/bin\nversion = 3.11.2\n')
    out = run_play(tmp_path, str(venv), check=False, rc=2)
    assert 'the staging virtual environment %s cannot be used' % venv in out, out
    assert 'Remedy: remove it (rm -rf %s)' % venv in out
    assert 'STAGE-RUNS' not in out and not os.path.exists(str(venv / 'bin' / 'python'))     # pip did not rebuild it


def run_wheelhouse(tmp_path, wheelhouse, check=False):
    play = [{'name': 'The wheelhouse transfer', 'hosts': 'localhost', 'gather_facts': False,
             'vars': {'hf_cache_venv': str(tmp_path / 'venv'), 'hf_cache_pip_wheelhouse': wheelhouse},
             'tasks': [{'name': 'Wheelhouse',
                        'ansible.builtin.include_role': {'name': 'inkling.fleet.hf_cache', 'tasks_from': 'wheelhouse'}}]}]
    path = tmp_path / 'wheelhouse-play.yml'
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCALHOST_WARNING='false', TMPDIR=str(tmp_path / 'controller-tmp'))
    (tmp_path / 'controller-tmp').mkdir(exist_ok=True)
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
            '-e', 'ansible_python_interpreter=' + sys.executable, str(path)] + (['--check'] if check else [])
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def wheels(tmp_path):
    src = tmp_path / 'wheels'
    src.mkdir()
    for name in ('huggingface_hub-2.4.0-py3-none-any.whl', 'tqdm-4.67.1-py3-none-any.whl'):
        (src / name).write_text(name)
    return src


@pytest.mark.skipif(os.geteuid() != 0, reason='the wheelhouse is unpacked as root:root')
def test_a_wheelhouse_directory_is_sent_as_one_archive_and_the_controller_keeps_nothing(tmp_path):
    src = wheels(tmp_path)
    out = run_wheelhouse(tmp_path, str(src), check=True)      # check mode: nothing on the host yet
    assert not (tmp_path / 'venv.wheels').exists(), out
    out = run_wheelhouse(tmp_path, str(src))
    dest = tmp_path / 'venv.wheels'
    assert sorted(os.listdir(str(dest))) == sorted(os.listdir(str(src))), out
    assert all(stat.S_IMODE(os.stat(str(dest / n)).st_mode) == 0o644 for n in os.listdir(str(dest)))
    assert stat.S_IMODE(os.stat(str(dest)).st_mode) == 0o755
    assert os.listdir(str(tmp_path / 'controller-tmp')) == []     # the private temporary directory is removed


@pytest.mark.skipif(os.geteuid() != 0, reason='the wheelhouse is unpacked as root:root')
def test_a_wheelhouse_archive_is_sent_as_it_is(tmp_path):
    src = wheels(tmp_path)
    archive = tmp_path / 'wheels.tar.gz'
    with tarfile.open(str(archive), 'w:gz') as tar:
        for name in os.listdir(str(src)):
            tar.add(str(src / name), arcname=name)
    run_wheelhouse(tmp_path, str(archive))
    assert sorted(os.listdir(str(tmp_path / 'venv.wheels'))) == sorted(os.listdir(str(src)))
    assert os.listdir(str(tmp_path / 'controller-tmp')) == []
