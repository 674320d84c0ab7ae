# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The unit_restore module run as Ansible runs it, with a systemctl on PATH that logs its arguments."""

import os

from inkling_test_helpers import run_module


def fake_systemctl(tmp_path, fail=''):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    log = tmp_path / 'systemctl.log'
    script = bin_dir / 'systemctl'
    script.write_text('#!/bin/sh\necho "$*" >> %s\n[ "$1" = "%s" ] && { echo failed >&2; exit 1; }\nexit 0\n'
                      % (log, fail))
    script.chmod(0o755)
    return {'PATH': '%s:%s' % (bin_dir, os.environ['PATH'])}, log


def test_rollback_of_a_first_deployment(tmp_path):
    env, log = fake_systemctl(tmp_path)
    unit = tmp_path / 'inkling-vllm.container'
    unit.write_text('[Container]\n')
    rc, result = run_module('unit_restore', {'unit': 'inkling-vllm.service', 'path': str(unit),
                                             'backup': str(tmp_path / 'none'), 'stop_removed': True},
                            env=env, tmp_path=tmp_path)
    assert rc == 0, result
    assert result['outcome'] == 'removed' and result['changed'] is True and not unit.exists()
    assert log.read_text().split('\n')[:3] == ['stop inkling-vllm.service', 'daemon-reload',
                                               'reset-failed inkling-vllm.service']


def test_a_failed_reload_fails_the_task(tmp_path):
    env, _log = fake_systemctl(tmp_path, fail='daemon-reload')
    unit, backup = tmp_path / 'u.container', tmp_path / 'b'
    unit.write_text('new\n')
    backup.write_text('old\n')
    rc, result = run_module('unit_restore', {'unit': 'u.service', 'path': str(unit), 'backup': str(backup)},
                            env=env, tmp_path=tmp_path)
    assert rc == 1 and result['failed'] is True
    assert result['msg'] == 'systemctl daemon-reload failed after the unit file was put back: failed'
    assert unit.read_text() == 'old\n'
    assert 'outcome' not in result                # nothing for the rollback to act on
    assert [c['argv'][1] for c in result['commands']] == ['daemon-reload']
