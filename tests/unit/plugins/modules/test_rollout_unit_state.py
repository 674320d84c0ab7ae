# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""rollout_unit_state: the unit's checksum (as ansible.builtin.stat gives it) and systemctl is-active, in one
call, run as Ansible runs it against a fake systemctl; and its pure parts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import sys

import pytest

from inkling_test_helpers import run_module
from ansible_collections.inkling.fleet.plugins.module_utils import unit_state as us


def sha256(path):
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def fake_systemctl(directory, answer, rc):
    path = os.path.join(str(directory), 'systemctl')
    with open(path, 'w') as handle:
        handle.write('#!%s\nimport sys\nassert sys.argv[1:] == ["is-active", "inkling-vllm.service"], sys.argv\n'
                     'print(%r)\nsys.exit(%d)\n' % (sys.executable, answer, rc))
    os.chmod(path, 0o755)


@pytest.mark.parametrize('answer,rc,active', [('active', 0, True), ('inactive', 3, False), ('activating', 3, False),
                                              ('failed', 3, False)])
def test_reads_the_checksum_and_the_state_in_one_call(tmp_path, answer, rc, active):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    fake_systemctl(bin_dir, answer, rc)
    unit = tmp_path / 'inkling-vllm.container'
    unit.write_text('[Container]\nImage=registry.example/vllm@sha256:%s\n' % ('a' * 64))
    rc_, out = run_module('rollout_unit_state', {'unit_path': str(unit), 'unit': 'inkling-vllm.service'},
                          env={'PATH': '%s:/usr/bin:/bin' % bin_dir}, tmp_path=tmp_path, check_mode=True)
    assert rc_ == 0, out
    assert out['changed'] is False
    assert out['unit_checksum'] == sha256(str(unit))
    assert (out['active_state'], out['active']) == (answer, active)


def test_no_unit_file_is_an_empty_checksum(tmp_path):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    fake_systemctl(bin_dir, 'inactive', 3)
    rc, out = run_module('rollout_unit_state', {'unit_path': str(tmp_path / 'absent.container'),
                                                'unit': 'inkling-vllm.service'},
                         env={'PATH': '%s:/usr/bin:/bin' % bin_dir}, tmp_path=tmp_path)
    assert rc == 0, out
    assert (out['unit_checksum'], out['active_state'], out['active']) == ('', 'inactive', False)


def test_checksum_of_reads_regular_files_only(tmp_path):
    unit = tmp_path / 'unit'
    unit.write_text('x')
    link = tmp_path / 'link'
    link.symlink_to(unit)
    digest = sha256
    assert us.checksum_of(str(unit), digest) == sha256(str(unit))
    assert us.checksum_of(str(link), digest) == ''          # as stat (follow: false) gives no checksum
    assert us.checksum_of(str(tmp_path), digest) == ''
    assert us.checksum_of(str(tmp_path / 'absent'), digest) == ''


def test_is_active_takes_systemctl_s_first_line():
    assert us.is_active('active\n') == ('active', True)
    assert us.is_active('inactive\n') == ('inactive', False)
    assert us.is_active('') == ('', False)
    assert us.is_active(None) == ('', False)


class NoSystemctl(object):
    @staticmethod
    def get_bin_path(name):
        return None


def test_a_host_without_systemctl_is_not_active(tmp_path):
    assert us.UnitState(NoSystemctl()).active_state('inkling-vllm.service') == ('', False)


def test_reads_the_state_file_when_asked(tmp_path):
    """The restart entry point used without the preflight entry point reads what the host serves here."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    fake_systemctl(bin_dir, 'active', 0)
    state = tmp_path / 'state.json'
    state.write_text('{"variant": "sm90-patched", "revision": "%s", "analysis": {"ok": true}}' % ('0' * 40))
    args = {'unit_path': str(tmp_path / 'absent.container'), 'unit': 'inkling-vllm.service'}
    env = {'PATH': '%s:/usr/bin:/bin' % bin_dir}
    # the state file alone (the restart entry point, before the unit is written): nothing else is asked
    rc, out = run_module('rollout_unit_state', {'state_file': str(state)}, env=env, tmp_path=tmp_path)
    assert rc == 0, out
    assert out['state'] == {'variant': 'sm90-patched', 'revision': '0' * 40, 'analysis': {'ok': True}}
    assert not set(out) & {'unit_checksum', 'active', 'active_state'}, out
    rc, out = run_module('rollout_unit_state', args, env=env, tmp_path=tmp_path)
    assert rc == 0 and 'state' not in out and out['active'] is True, out
    rc, out = run_module('rollout_unit_state', {'state_file': str(tmp_path / 'none.json')}, env=env, tmp_path=tmp_path)
    assert rc == 0 and out['state'] == {}, out
    state.write_text('{"variant": ')
    rc, out = run_module('rollout_unit_state', {'state_file': str(state)}, env=env, tmp_path=tmp_path)
    assert rc != 0 and str(state) in out['msg'] and 'Remedy' in out['msg'], out


def test_read_state_never_follows_a_link(tmp_path):
    target = tmp_path / 'elsewhere.json'
    target.write_text('{"variant": "planted"}')
    link = tmp_path / 'state.json'
    link.symlink_to(target)
    assert us.read_state(str(link)) == {}
    assert us.read_state(str(target)) == {'variant': 'planted'}
    assert us.read_state(str(tmp_path / 'no' / 'state.json')) == {}
    with pytest.raises(ValueError, match='expected the object'):
        us.parse_state(b'[1, 2]', '/var/lib/inkling/rollout-state.json')
