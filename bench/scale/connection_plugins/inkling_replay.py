# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Bench only: a connection to a simulated GPU host (bench/rollout_scale.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
name: inkling_replay
short_description: Bench only - a simulated GPU host that answers each module run from bench/scale
description:
  - Used by bench/rollout_scale.py, never by a fleet. Instead of running a module on a host, it answers the
    module's payload (AnsiballZ, sent on stdin with pipelining) with what the simulated host returns
    (bench/scale/scale_responders.py), and keeps the host's state between runs in the benchmark's state
    directory. Ansible's own commands (the remote temporary directory) are answered too; a file transfer
    is kept in memory for the module that reads it.
  - Each call's CPU time is appended to sim-cpu.log in the state directory, so the benchmark can subtract
    the simulation's own cost from the controller's.
author: inkling.fleet contributors
options:
  state_dir:
    description: The benchmark's state directory (simulated hosts, fixtures, logs).
    type: path
    required: true
    env:
      - name: INKLING_SCALE_STATE
    vars:
      - name: inkling_scale_state
extends_documentation_fragment:
  - connection_pipelining
'''

import os
import resource
import sys
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection import ConnectionBase

SCALE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if SCALE not in sys.path:
    sys.path.insert(0, SCALE)

import scale_responders  # noqa: E402  pylint: disable=wrong-import-position


def _cpu():
    own = time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + children.ru_utime + children.ru_stime


class Connection(ConnectionBase):
    """A simulated host: module payloads are answered, not run."""

    transport = 'inkling_replay'
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super(Connection, self).__init__(*args, **kwargs)
        self._puts = {}

    def _connect(self):
        self._connected = True
        return self

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        start = _cpu()
        state_dir = self.get_option('state_dir')
        host = self._play_context.remote_addr
        rc, out, err, what = scale_responders.exec_command(state_dir, host, cmd, in_data, self._puts)
        scale_responders.append_line(os.path.join(state_dir, 'sim-cpu.log'),
                                     '%s\t%s\t%.6f\n' % (what, host, _cpu() - start))
        return rc, out, err

    def put_file(self, in_path, out_path):
        super(Connection, self).put_file(in_path, out_path)
        try:
            with open(in_path, 'rb') as handle:
                self._puts[out_path] = handle.read()
        except (IOError, OSError) as exc:
            raise AnsibleConnectionFailure('inkling_replay: cannot read %s: %s' % (in_path, exc))

    def fetch_file(self, in_path, out_path):
        super(Connection, self).fetch_file(in_path, out_path)
        raise AnsibleConnectionFailure('inkling_replay: fetching files from a simulated host is not simulated (%s)'
                                       % in_path)

    def close(self):
        self._connected = False
