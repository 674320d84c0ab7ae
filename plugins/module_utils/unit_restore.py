# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Put a host's previous service unit back, in one operation, for every path of the rollout that
needs it: a host held back before its stop (the running server is left alone), and a rollback after
a failed restart or gate (the caller restarts the restored unit).

- The previous content is the backup the service role's quadlet_unit kept; it is written over the
  unit file atomically (a temporary file, then a rename), only when it differs.
- With no backup (a first deployment) the new unit file is removed, after stopping the unit when
  ``stop_removed`` (a rollback: the new server is running); the host is left as it was before the run.
- ``keep``: the unit file is the one to keep (a replica member whose unit did not change).
- Then ``systemctl daemon-reload`` when the file changed, and always ``systemctl reset-failed`` of
  the unit, so that the start limit of the failed attempts does not refuse the next start.

The files are root's (the quadlet and systemd directories), never under a directory a container
can write; the backup and the unit are still read and replaced without following a link.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import os

from ansible_collections.inkling.fleet.plugins.module_utils.nofollow import (
    lexists, open_dir, open_regular, write_atomic)
from ansible_collections.inkling.fleet.plugins.module_utils.systemd import Systemctl

UNIT_LIMIT = 1024 * 1024

# The options of inkling.fleet.unit_restore (its DOCUMENTATION describes them).
ARGUMENT_SPEC = dict(
    unit=dict(type='str', required=True),
    path=dict(type='path', required=True),
    backup=dict(type='path', required=True),
    keep=dict(type='bool', default=False),
    stop_removed=dict(type='bool', default=False),
)


class UnitRestoreError(Exception):
    def __init__(self, message, result):
        super(UnitRestoreError, self).__init__(message)
        self.result = result


def _read(path):
    """The bytes of a regular file, opened without following a link (nofollow.open_regular); None
    when absent. A link or anything but a regular file raises: restoring through it, or taking it for
    "no backup" (and removing the unit), would both be wrong."""
    directory, name = os.path.split(path)
    try:
        fd = open_dir(directory or '.')
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    try:
        file_fd = open_regular(name, fd)
        if file_fd is None:
            if not lexists(name, fd):
                return None
            raise UnitRestoreError('%s is not a regular file (a link or another kind of file); nothing was '
                                   'changed. Remedy: look at what put it there, remove it and run again' % path, {})
        try:
            return os.read(file_fd, UNIT_LIMIT)
        finally:
            os.close(file_fd)
    finally:
        os.close(fd)


def plan(unit_content, backup_content, keep=False):
    """What restoring does: 'kept' (the unit file stays), 'restored' (the backup goes back; ``write``
    says whether its content differs) or 'removed' (no backup: the new unit file goes, ``write`` says
    whether there is one to remove). Pure: the contents are bytes or None (absent)."""
    if keep and unit_content is not None:
        return {'outcome': 'kept', 'write': False}
    if backup_content is not None:
        return {'outcome': 'restored', 'write': backup_content != unit_content}
    return {'outcome': 'removed', 'write': unit_content is not None}


class UnitRestore(object):
    """``run(argv)`` returns (rc, stdout, stderr): AnsibleModule.run_command in the module."""

    def __init__(self, run, systemctl='systemctl'):
        self.run = run
        self.systemctl = systemctl
        self.sc = None

    def restore(self, unit, path, backup, keep=False, stop_removed=False, check_mode=False):
        self.sc = Systemctl(self.run, self.systemctl)  # this restore's commands, for its result
        current = _read(path)
        previous = _read(backup)
        what = plan(current, previous, keep)
        result = dict(what, changed=what['write'], stopped=False, commands=self.sc.commands)
        if check_mode:
            return result
        if what['outcome'] == 'removed' and stop_removed:
            if self._systemctl(result, 'stop', unit) != 0 and self._systemctl(result, 'is-active', unit) == 0:
                # Still running: removing its file now would leave a server no unit describes.
                raise UnitRestoreError('systemctl stop %s failed (%s) and the unit is still active; its file was '
                                       'left in place. Remedy: stop it by hand (systemctl stop %s), then run again'
                                       % (unit, result['commands'][0]['stderr'] or 'no message', unit), result)
            result['stopped'] = True
        if what['write']:
            directory, name = os.path.split(path)
            fd = open_dir(directory)
            try:
                if what['outcome'] == 'restored':
                    write_atomic(name, fd, previous, mode=0o644)
                else:
                    os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)
            if self._systemctl(result, 'daemon-reload') != 0:
                raise UnitRestoreError('systemctl daemon-reload failed after the unit file was %s: %s'
                                       % ('put back' if what['outcome'] == 'restored' else 'removed',
                                          result['commands'][-1]['stderr'] or 'no message'), result)
        self.sc.reset_failed(unit)
        return result

    def _systemctl(self, result, *args):
        return self.sc.call(*args)[0]
