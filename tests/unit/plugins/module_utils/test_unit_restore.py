# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""module_utils/unit_restore.py: the rollout's one restore operation, on real files with a fake systemctl."""

import os

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import unit_restore as ur

UNIT = 'inkling-vllm.service'


class Systemctl(object):
    def __init__(self, fail=()):
        self.calls = []
        self.fail = fail

    def __call__(self, argv):
        self.calls.append(argv[1:])
        return (1, '', 'boom') if argv[1] in self.fail else (0, '', '')


def files(tmp_path, unit=b'new', backup=b'old'):
    path, backup_path = tmp_path / 'inkling-vllm.container', tmp_path / 'backup'
    if unit is not None:
        path.write_bytes(unit)
    if backup is not None:
        backup_path.write_bytes(backup)
    return str(path), str(backup_path)


def restore(tmp_path, run, **kw):
    return ur.UnitRestore(run).restore(UNIT, kw.pop('path'), kw.pop('backup'), **kw)


@pytest.mark.parametrize('unit,backup,keep,expect', [
    (b'new', b'old', False, {'outcome': 'restored', 'write': True}),
    (b'old', b'old', False, {'outcome': 'restored', 'write': False}),
    (None, b'old', False, {'outcome': 'restored', 'write': True}),
    (b'new', None, False, {'outcome': 'removed', 'write': True}),
    (None, None, False, {'outcome': 'removed', 'write': False}),
    (b'new', b'old', True, {'outcome': 'kept', 'write': False}),
    (None, b'old', True, {'outcome': 'restored', 'write': True}),
])
def test_plan(unit, backup, keep, expect):
    assert ur.plan(unit, backup, keep) == expect


def test_the_backup_goes_back_then_reload_and_reset(tmp_path):
    path, backup = files(tmp_path)
    run = Systemctl()
    result = restore(tmp_path, run, path=path, backup=backup)
    assert open(path, 'rb').read() == b'old' and oct(os.stat(path).st_mode & 0o777) == '0o644'
    assert result['outcome'] == 'restored' and result['changed'] is True and result['stopped'] is False
    assert run.calls == [['daemon-reload'], ['reset-failed', UNIT]]


def test_an_unchanged_unit_is_not_written_and_systemd_not_reloaded(tmp_path):
    path, backup = files(tmp_path, unit=b'old')
    run = Systemctl()
    result = restore(tmp_path, run, path=path, backup=backup)
    assert result['changed'] is False and run.calls == [['reset-failed', UNIT]]


def test_a_first_deployment_is_stopped_and_removed_on_rollback(tmp_path):
    path, backup = files(tmp_path, backup=None)
    run = Systemctl()
    result = restore(tmp_path, run, path=path, backup=backup, stop_removed=True)
    assert not os.path.lexists(path)
    assert result['outcome'] == 'removed' and result['stopped'] is True
    assert run.calls == [['stop', UNIT], ['daemon-reload'], ['reset-failed', UNIT]]


def test_a_failed_stop_of_a_unit_no_longer_active_still_removes_it(tmp_path):
    path, backup = files(tmp_path, backup=None)
    run = Systemctl(fail=('stop', 'is-active'))   # is-active exits non-zero: not active
    result = restore(tmp_path, run, path=path, backup=backup, stop_removed=True)
    assert not os.path.lexists(path) and result['stopped'] is True
    assert result['commands'][0] == {'argv': ['systemctl', 'stop', UNIT], 'rc': 1, 'stderr': 'boom'}


def test_a_failed_stop_of_a_running_unit_leaves_its_file_and_fails(tmp_path):
    path, backup = files(tmp_path, backup=None)
    run = Systemctl(fail=('stop',))               # is-active answers 0: still running
    with pytest.raises(ur.UnitRestoreError) as exc:
        restore(tmp_path, run, path=path, backup=backup, stop_removed=True)
    assert 'systemctl stop %s failed (boom) and the unit is still active' % UNIT in str(exc.value)
    assert open(path, 'rb').read() == b'new' and run.calls == [['stop', UNIT], ['is-active', UNIT]]


def test_held_back_a_first_deployment_loses_its_file_but_is_not_stopped(tmp_path):
    path, backup = files(tmp_path, backup=None)
    run = Systemctl()
    result = restore(tmp_path, run, path=path, backup=backup)
    assert not os.path.lexists(path) and result['stopped'] is False
    assert ['stop', UNIT] not in run.calls


def test_keep_leaves_the_file_and_still_resets(tmp_path):
    path, backup = files(tmp_path)
    run = Systemctl()
    result = restore(tmp_path, run, path=path, backup=backup, keep=True)
    assert open(path, 'rb').read() == b'new' and result['outcome'] == 'kept'
    assert run.calls == [['reset-failed', UNIT]]


def test_check_mode_changes_nothing_and_runs_nothing(tmp_path):
    path, backup = files(tmp_path, backup=None)
    run = Systemctl()
    result = restore(tmp_path, run, path=path, backup=backup, stop_removed=True, check_mode=True)
    assert os.path.exists(path) and run.calls == []
    assert result['outcome'] == 'removed' and result['changed'] is True


def test_a_failed_reload_fails_with_what_was_done(tmp_path):
    path, backup = files(tmp_path)
    with pytest.raises(ur.UnitRestoreError) as exc:
        restore(tmp_path, Systemctl(fail=('daemon-reload',)), path=path, backup=backup)
    assert 'systemctl daemon-reload failed after the unit file was put back: boom' in str(exc.value)
    assert exc.value.result['outcome'] == 'restored'


def test_a_linked_backup_is_neither_followed_nor_taken_for_no_backup(tmp_path):
    path, backup = files(tmp_path, backup=None)
    secret = tmp_path / 'elsewhere'
    secret.write_bytes(b'[Container]\nImage=evil\n')
    os.symlink(str(secret), backup)
    run = Systemctl()
    with pytest.raises(ur.UnitRestoreError) as exc:
        restore(tmp_path, run, path=path, backup=backup, stop_removed=True)
    assert 'is not a regular file' in str(exc.value)
    assert open(path, 'rb').read() == b'new' and run.calls == []      # not removed, not stopped


def test_a_unit_file_that_is_a_link_is_refused_and_its_target_left_alone(tmp_path):
    path, backup = files(tmp_path, unit=None)
    target = tmp_path / 'target'
    target.write_bytes(b'untouched')
    os.symlink(str(target), path)
    with pytest.raises(ur.UnitRestoreError):
        restore(tmp_path, Systemctl(), path=path, backup=backup)
    assert target.read_bytes() == b'untouched'
