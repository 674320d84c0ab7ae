# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""What the restart decision reads from a host in one round trip: the checksum of the service's unit
file, whether the service is active (``systemctl is-active``) and, when asked, the rollout's state
file (what the host serves). Read-only.

``UnitState`` takes the AnsibleModule (for ``get_bin_path``, ``run_command`` and ``digest_from_file``);
``checksum_of`` and ``is_active`` are the pure parts, tested without a host.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import stat

from ansible_collections.inkling.fleet.plugins.module_utils.nofollow import read_small


def checksum_of(path, digest):
    """The ``digest(path)`` of a regular, readable file (not followed through a link, as
    ansible.builtin.stat reads it), else '' (absent, a directory, a link, unreadable)."""
    try:
        mode = os.lstat(path).st_mode
    except (IOError, OSError):
        return ''
    if not stat.S_ISREG(mode) or not os.access(path, os.R_OK):
        return ''
    return digest(path) or ''


def is_active(stdout):
    """``systemctl is-active``'s answer (its first line, trimmed) and whether it is ``active``."""
    state = (stdout or '').strip().splitlines()
    state = state[0].strip() if state else ''
    return state, state == 'active'


def parse_state(raw, path):
    """The rollout state file's record: {} for an absent file (a host never rolled out), the JSON
    object otherwise. Raises ValueError naming the file when it holds anything else."""
    if raw is None:
        return {}
    try:
        data = json.loads(raw.decode('utf-8'))
    except ValueError as exc:
        raise ValueError('%s is not the JSON the rollout writes (%s). Remedy: remove it and roll the host '
                         'out again; it is rewritten after the next passed gate' % (path, exc))
    if not isinstance(data, dict):
        raise ValueError('%s holds a JSON %s, expected the object the rollout writes. Remedy: remove it and '
                         'roll the host out again' % (path, type(data).__name__))
    return data


def read_state(path):
    """The state file at ``path`` read without following a link in its last component (a link or a
    non-file reads as absent), parsed by ``parse_state``."""
    directory, name = os.path.split(path)
    try:
        fd = os.open(directory or '.', os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return {}
    try:
        return parse_state(read_small(name, fd), path)
    finally:
        os.close(fd)


class UnitState(object):
    """Reads one unit's checksum and its service's state."""

    def __init__(self, module):
        self.module = module

    def checksum(self, path):
        return checksum_of(path, lambda p: self.module.digest_from_file(p, 'sha256'))

    def active_state(self, unit):
        """(state, active): '' and False when systemctl is missing (a host without systemd serves nothing)."""
        systemctl = self.module.get_bin_path('systemctl')
        if not systemctl:
            return '', False
        _rc, out, _err = self.module.run_command([systemctl, 'is-active', unit], environ_update={'LC_ALL': 'C'})
        return is_active(out)

    def read(self, unit_path=None, unit=None, state_file=None):
        """What is asked: the unit's checksum (``unit_path``), its state (``unit``), the state file."""
        result = {}
        if unit_path:
            result['unit_checksum'] = self.checksum(unit_path)
        if unit:
            result['active_state'], result['active'] = self.active_state(unit)
        if state_file:
            result['state'] = read_state(state_file)
        return result
