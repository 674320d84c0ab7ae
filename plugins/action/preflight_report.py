# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin inkling.fleet.preflight_report: write a host's preflight report on the controller.

Documentation: plugins/modules/preflight_report.py. One task for what was a ``file`` (the report
directory, mode 0700) and a ``copy`` (the report, mode 0600) delegated to localhost: it runs on the
controller, as the controller user (never with become), in check mode too (the report is an output).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import tempfile

from ansible_collections.inkling.fleet.plugins.module_utils import atomic_file
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction
from ansible_collections.inkling.fleet.plugins.plugin_utils.controller_files import NotADirectory, make_private_dirs

ARGUMENT_SPEC = {
    'report_dir': {'type': 'path', 'required': True},
    'host': {'type': 'str'},
    'content': {'type': 'str', 'required': True},
}

DIR_MODE = 0o700    # reports name hosts, their GPUs and failures: the controller user's only
FILE_MODE = 0o600


class ReportError(Exception):
    pass


def make_report_dir(directory):
    """Create ``directory`` (and each missing parent) with mode 0700, or set an existing one's mode
    to 0700, as ansible.builtin.file state=directory mode=0700 does; the hosts' forks may race to
    create it. Returns whether it changed."""
    try:
        return make_private_dirs(directory, DIR_MODE)
    except NotADirectory as exc:
        raise ReportError(str(exc))


def write_report(directory, host, content):
    """Write ``<directory>/<host>.json`` (mode 0600): a new file renamed over the old one (which
    replaces a link there, never its target). Returns (path, whether the directory changed)."""
    if not host or os.sep in host or host in ('.', '..'):
        raise ReportError('%r is not a host name a report file can be named after' % (host,))
    changed = make_report_dir(directory)
    path = os.path.join(directory, host + '.json')
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-')
    atomic_file.replace_file(fd, tmp, path, FILE_MODE, lambda handle: handle.write(content))
    return path, changed


class ActionModule(InklingAction):
    _requires_connection = False
    _supports_check_mode = True
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_action(self, result, args, task_vars):
        host = args['host'] or task_vars.get('inventory_hostname')
        try:
            path, changed = write_report(args['report_dir'], host, args['content'])
        except (ReportError, OSError) as exc:
            result.update(failed=True, changed=False,
                          msg='preflight report of %s: cannot write it under %s: %s. Remedy: set preflight_report_dir to '
                              'a directory the controller user may write (not a file)' % (host, args['report_dir'], exc))
            return result
        # The directory made on a first run is a change; the report itself is not a change to the host.
        result.update(changed=changed, path=path)
        return result
