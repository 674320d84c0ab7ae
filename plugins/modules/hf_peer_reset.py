#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_peer_reset
short_description: End what a killed run of the peer fan-out left on a host (copy job, rsync daemon, their files)
version_added: 0.2.0
description:
  - 'The C(peer) source of the C(inkling.fleet.hf_cache) role runs a copy job (M(inkling.fleet.hf_peer_copy), async)
    and an rsync daemon (a transient systemd unit) on every host, and stops both when staging ends, also on
    failure. A run that is killed (the controller died, Ctrl-C twice) cannot: this module, run at the start of
    the next peer staging, ends them.'
  - 'The copy job of the killed run is found through O(pid_file) (written by the job: its process id and process
    group); it is ended (its process group: the async wrapper, the job, its rsync) only when that process still
    runs a C(hf_peer_copy) module, so a reused process id is never signalled. Then O(unit) is stopped when it is
    loaded, and O(remove) (the daemon''s configuration and secrets, the jobs'' runtime directory) removed.'
  - Changes nothing when nothing was left; supports check mode (says what it would end).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit:
    description: The rsync daemon's transient unit, without C(.service).
    type: str
    required: true
  pid_file:
    description: The copy job's pid file (JSON with C(pid) and C(pgid)).
    type: path
    required: true
  remove:
    description: Files and directories a killed run left (removed after the unit stopped).
    type: list
    elements: path
    default: []
  kill_timeout_s:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 5
seealso:
  - module: inkling.fleet.hf_peer_copy
'''

EXAMPLES = r'''
- name: End what a killed run left
  inkling.fleet.hf_peer_reset:
    unit: inkling-hf-rsyncd
    pid_file: /run/inkling-hf-peer-copy.pid
    remove: [/run/inkling-hf-rsyncd.conf, /run/inkling-hf-rsyncd.secrets, /run/inkling-hf-cache]
'''

RETURN = r'''
killed:
  description: Process ids of the killed run's copy job that were ended (or would be, in check mode).
  returned: always
  type: list
  elements: int
stopped:
  description: True when the daemon's unit was stopped (or would be).
  returned: always
  type: bool
removed:
  description: Paths removed (or that would be).
  returned: always
  type: list
  elements: str
'''

import json
import os
import shutil
import signal
import time

from ansible.module_utils.basic import AnsibleModule

JOB_MARK = 'hf_peer_copy'


def cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return f.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except (IOError, OSError):
        return None


def alive(pid):
    """True while pid runs (a zombie, ended but not yet reaped by its parent, does not count)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (IOError, OSError, IndexError):
        return False


def job_pids(pid_file):
    """(pid, pgid) of a copy job still running, from its pid file; (None, None) otherwise."""
    try:
        with open(pid_file) as f:
            data = json.load(f)
        pid, pgid = int(data['pid']), int(data.get('pgid') or 0)
    except (IOError, OSError, ValueError, KeyError, TypeError):
        return None, None
    line = cmdline(pid)
    if pid <= 1 or not line or JOB_MARK not in line:
        return None, None
    return pid, pgid


def end_job(pid, pgid, timeout):
    """SIGTERM the job's process group (or the job alone), then SIGKILL what is left."""
    own = os.getpgid(0)
    group = pgid if pgid and pgid > 1 and pgid != own else None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            if group:
                os.killpg(group, sig)
            else:
                os.kill(pid, sig)
        except OSError:
            return
        deadline = time.time() + timeout
        while time.time() < deadline and alive(pid):
            time.sleep(0.1)
        if not alive(pid):
            return


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type='str', required=True),
            pid_file=dict(type='path', required=True),
            remove=dict(type='list', elements='path', default=[]),
            kill_timeout_s=dict(type='int', default=5),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = {'changed': False, 'killed': [], 'stopped': False, 'removed': []}
    pid, pgid = job_pids(p['pid_file'])
    if pid:
        result['killed'].append(pid)
        if not module.check_mode:
            end_job(pid, pgid, p['kill_timeout_s'])
    unit = p['unit'] + '.service'
    systemctl = module.get_bin_path('systemctl')
    rc, out, state = 1, '', {}
    if systemctl:
        rc, out, dummy = module.run_command([systemctl, 'show', '-p', 'LoadState', '-p', 'ActiveState', unit])
        state = dict(line.split('=', 1) for line in out.splitlines() if '=' in line)
    if rc == 0 and state.get('LoadState') == 'loaded' and state.get('ActiveState') not in ('inactive', None):
        result['stopped'] = True
        if not module.check_mode:
            rc, dummy, err = module.run_command([systemctl, 'stop', unit])
            if rc != 0:
                module.fail_json(msg='%s: cannot stop %s left by a killed run: %s' % (os.uname()[1], unit, err.strip()),
                                 **result)
            module.run_command([systemctl, 'reset-failed', unit])
    for path in p['remove'] + [p['pid_file']]:
        if os.path.lexists(path):
            result['removed'].append(path)
            if not module.check_mode:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
    result['changed'] = bool(result['killed'] or result['stopped'] or
                             [x for x in result['removed'] if x != p['pid_file']])
    if result['changed']:
        result['msg'] = '%s: ended what a killed run of the peer fan-out left: %s' % (os.uname()[1], ', '.join(
            (['copy job %s' % result['killed']] if result['killed'] else []) + (['%s' % unit] if result['stopped'] else [])
            + result['removed']))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
