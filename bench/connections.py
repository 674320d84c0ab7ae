#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout over SSH (as a real fleet: an unprivileged account, sudo, pipelining, ControlPersist)
against the same rollout over the containers.podman.podman connection (root, no pipelining), on the
lab's four hosts: the first deploy over SSH, then no-op re-runs (changed=0) over each connection.

Needs the lab: `bash lab/lab.sh up` (this script runs it). The first deploy is skipped when the hosts
already serve (--no-first). The podman runs use a copy of inventory/lab whose hosts are reached through
podman; everything else (group_vars, the playbook) is the same.

  .venv/bin/python bench/connections.py [--runs 2] [--no-first] [--limit HOSTS] [--quick]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, '.venv', 'bin')
PLAYBOOK = os.path.join(REPO, 'playbooks', 'deploy_inkling.yml')
INVENTORY = os.path.join(REPO, 'inventory', 'lab')


def podman_inventory(tmp):
    """inventory/lab with the hosts reached through podman as root (what the lab did before SSH)."""
    inv = os.path.join(tmp, 'lab-podman')
    shutil.copytree(INVENTORY, inv, symlinks=False)
    with open(os.path.join(inv, 'hosts.yml')) as f:
        text = f.read()
    text = re.sub(r'    ansible_connection: ssh\n.*\n    ansible_ssh_common_args: [^\n]*\n',
                  '    ansible_connection: containers.podman.podman\n    ansible_remote_tmp: /root/.ansible/tmp\n',
                  text, flags=re.S)
    if 'containers.podman.podman' not in text:
        sys.exit('could not rewrite %s for the podman connection' % os.path.join(inv, 'hosts.yml'))
    with open(os.path.join(inv, 'hosts.yml'), 'w') as f:
        f.write(text)
    with open(os.path.join(inv, 'group_vars', 'inkling_fleet.yml'), 'w') as f:
        f.write('---\nansible_python_interpreter: /usr/bin/python3\n')
    return inv


def run(inventory, label, extra=()):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), ANSIBLE_NOCOLOR='1',
               XDG_STATE_HOME=os.path.join(tempfile.gettempdir(), 'inkling-bench-connections'))
    argv = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory, PLAYBOOK] + list(extra)
    t0, c0 = time.time(), os.times()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall, c1 = time.time() - t0, os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    recap = re.findall(r'^(\S+)\s+: ok=(\d+)\s+changed=(\d+).*?failed=(\d+)', proc.stdout, flags=re.M)
    tasks = max((int(ok) for _h, ok, _c, _f in recap), default=0)
    changed = sum(int(c) for _h, _o, c, _f in recap)
    failed = sum(int(f) for _h, _o, _c, f in recap)
    print('  %-34s %7.1f s wall %7.1f s controller CPU  ok/host<=%d changed=%d failed=%d rc=%d'
          % (label, wall, cpu, tasks, changed, failed, proc.returncode))
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-2000:])
    return wall, changed, proc.returncode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    ap.add_argument('--runs', type=int, default=2, help='no-op re-runs per connection (default 2)')
    ap.add_argument('--no-first', action='store_true', help='skip the first deploy (the hosts already serve)')
    ap.add_argument('--limit', default='', help='ansible-playbook --limit (default: the 4 hosts)')
    ap.add_argument('--quick', action='store_true', help='one no-op re-run per connection, no first deploy')
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.no_first = 1, True
    extra = ['--limit', args.limit] if args.limit else []
    subprocess.run(['bash', os.path.join(REPO, 'lab', 'lab.sh'), 'up'], cwd=REPO, check=True)
    tmp = tempfile.mkdtemp(prefix='inkling-bench-connections.')
    try:
        pod = podman_inventory(tmp)
        print('rollout on %s, SSH (inkling-ops + sudo, pipelining, ControlPersist) against '
              'containers.podman.podman (root)' % (args.limit or "the lab's 4 hosts"))
        if not args.no_first and run(INVENTORY, 'first deploy or upgrade, SSH', extra)[2] != 0:
            print('the first deploy failed (output above)')
            return 1
        results = {'ssh': [], 'podman': []}
        for i in range(args.runs):
            for name, inv in (('ssh', INVENTORY), ('podman', pod)):
                wall, changed, rc = run(inv, 'no-op re-run %d, %s' % (i + 1, name), extra)
                if rc == 0 and changed == 0:
                    results[name].append(wall)
        if results['ssh'] and results['podman']:
            s, p = min(results['ssh']), min(results['podman'])
            print('no-op re-run, best of %d: SSH %.1f s, podman %.1f s (SSH takes %.0f %% of podman\'s time)'
                  % (args.runs, s, p, 100.0 * s / p))
            return 0
        print('a no-op re-run did not end with changed=0 and rc 0 (output above)')
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
