# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""What the restart decision reads from a host in one round trip: the checksum of the service's unit
file and whether the service is active (``systemctl is-active``). Read-only.

``UnitState`` takes the AnsibleModule (for ``get_bin_path``, ``run_command`` and ``digest_from_file``);
``checksum_of`` and ``is_active`` are the pure parts, tested without a host.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import stat


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

    def read(self, unit_path, unit):
        state, active = self.active_state(unit)
        return {'unit_checksum': self.checksum(unit_path), 'active_state': state, 'active': active}
