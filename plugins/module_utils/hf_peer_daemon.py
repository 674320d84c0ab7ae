# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""What a killed run of the hf_cache peer fan-out left on a host (its copy job, its rsync daemon, their
files), ended: used by the modules hf_peer_reset and hf_peer_serve (which ends them before it starts this
run's daemon, in the same task). And the rsync client of hf_peer_copy, started without waiting for it: the
copy hashes the file rsync writes while rsync runs (AnsibleModule.run_command returns only at its end)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import signal
import subprocess
import time

from ansible_collections.inkling.fleet.plugins.module_utils.systemd import Systemctl

JOB_MARK = 'hf_peer_copy'


def start_rsync(argv, env, stderr=None):
    """rsync started in the background, stdout discarded, stderr readable (text) or into the open file stderr
    (a batch's rsync may say more than a pipe holds: a line per blob the source lacks)."""
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr if stderr is not None else subprocess.PIPE,
                            env=env, universal_newlines=True)


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


def reset(module, unit, pid_file, remove, kill_timeout_s=5):
    """End the copy job of pid_file (when it still runs hf_peer_copy), stop unit when it is loaded and not
    inactive, remove the paths of remove and pid_file. Returns {changed, killed, stopped, removed[, msg]};
    fails the module when the unit cannot be stopped. Check mode: says what it would end."""
    result = {'changed': False, 'killed': [], 'stopped': False, 'removed': []}
    pid, pgid = job_pids(pid_file)
    if pid:
        result['killed'].append(pid)
        if not module.check_mode:
            end_job(pid, pgid, kill_timeout_s)
    unit = unit + '.service'
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
            Systemctl(module.run_command, systemctl).reset_failed(unit)
    for path in list(remove or []) + [pid_file]:
        if os.path.lexists(path):
            result['removed'].append(path)
            if not module.check_mode:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
    result['changed'] = bool(result['killed'] or result['stopped'] or [x for x in result['removed'] if x != pid_file])
    if result['changed']:
        result['msg'] = '%s: ended what a killed run of the peer fan-out left: %s' % (os.uname()[1], ', '.join(
            (['copy job %s' % result['killed']] if result['killed'] else []) + (['%s' % unit] if result['stopped'] else [])
            + result['removed']))
    return result


# The options of inkling.fleet.hf_peer_reset (its DOCUMENTATION describes them).
RESET_ARGUMENT_SPEC = dict(
    unit=dict(type='str', required=True),
    pid_file=dict(type='path', required=True),
    remove=dict(type='list', elements='path', default=[]),
    kill_timeout_s=dict(type='int', default=5),
)


# The options of inkling.fleet.hf_peer_serve (its DOCUMENTATION describes them).
SERVE_ARGUMENT_SPEC = dict(
    unit=dict(type='str', required=True),
    config=dict(type='str', required=True),
    config_path=dict(type='path', required=True),
    secrets_path=dict(type='path', required=True),
    user=dict(type='str', required=True),
    secret=dict(type='str', required=True, no_log=True),
    rundir=dict(type='path', required=True),
    address=dict(type='str'),
    pid_file=dict(type='path'),
    runtime_max_s=dict(type='int', default=0),
    remove=dict(type='list', elements='path', default=[]),
    relay_port=dict(type='int', default=0),
    relay_repo_dir=dict(type='path'),
    relay_allow=dict(type='list', elements='str', default=[]),
    relay_owner=dict(type='str'),
    relay_group=dict(type='str'),
    create_owner=dict(type='bool', default=False),
    relay_hold_s=dict(type='float', default=2),
    relay_stall_s=dict(type='int', default=15),
)
