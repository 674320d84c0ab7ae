# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Directories the action plugins write on the controller (reports, the journal), made safely when
the hosts of a play run the same task in parallel forks."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import os
import stat


class NotADirectory(Exception):
    pass


def make_private_dirs(directory, mode=0o700, set_mode=True):
    """Create ``directory`` and each missing parent with ``mode``, as ansible.builtin.file
    state=directory does, and (``set_mode``) give an existing ``directory`` that mode. Another fork of the same
    task may create any of them at the same moment: that is not an error. A file or a link to a
    file where a directory belongs raises NotADirectory. Returns whether this call changed anything."""
    changed = False
    missing = []
    path = os.path.abspath(directory)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise NotADirectory('%s is not a directory' % path)
    for path in reversed(missing):
        try:
            os.mkdir(path, mode)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
            if not os.path.isdir(path):
                raise NotADirectory('%s is not a directory' % path)
            continue            # made by a parallel fork a moment ago
        os.chmod(path, mode)
        changed = True
    if set_mode and stat.S_IMODE(os.stat(directory).st_mode) != mode:
        os.chmod(directory, mode)
        changed = True
    return changed
