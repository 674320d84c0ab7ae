#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Staging fan-out: the hf_cache role's ``hub`` source versus ``peer`` on tc-limited links.

Runs beside the lab (``lab/lab.sh up --services-only`` is called for the network and the
host wheels; the lab's own hosts and hub are not touched). It starts its own containers,
all labelled like the lab's (``lab/lab.sh down`` removes them too):

* ``bench-hub``: the hub test double (``lab/hub/fake_hub.py``) serving a synthetic
  repository of ``--size-mb`` MB in ``--shards`` files, generated once under
  ``lab/.state/bench-hub`` by ``lab/hub/make-model.py``;
* ``bench-fanout-01`` .. ``NN``: ``--hosts`` systemd host containers.

What every one of them sends (eth0 egress) is limited to ``--rate`` with tc
(``lab/lab.sh shape``), so the hub's link and every host's link have the same capacity.
After one warm-up (the staging virtualenv, ``--tags hf_cache_install``), it stages the
snapshot with ``bench/hf_cache_fanout.yml`` into an emptied cache three times:

* ``hub`` on one host: T1, one host's transfer time (the unit of the target);
* ``hub`` on all hosts: every host downloads from the hub, which shares its link;
* ``peer`` on all hosts: one seed downloads, then every holder serves one host per round.

It prints the playbook's wall time, its ratio to T1 and the bytes the hub served for the
repository, checks that every host ended with a complete snapshot, and prints the
targets of issue 9: ``peer`` wall time at most (log2(N) + 1) x T1, and the hub serving the
snapshot once. A missed target is reported, not an error: this is a benchmark.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
STATE = os.path.join(REPO, 'lab', '.state')
HUB_DATA = os.path.join(STATE, 'bench-hub')
WORK = os.path.join(STATE, 'bench-fanout')
HUB = 'bench-hub'
HUB_PORT = 8090
HOST_PREFIX = 'bench-fanout-'
LAB_LABEL = 'io.inkling.lab=1'
LAB_NETWORK = 'inkling-lab'
LAB_IMAGE = 'localhost/inkling-lab-host:trixie'
REPO_ID = 'inkling-bench/fanout-synthetic'
CACHE_DIR = '/srv/bench/hub'


def run(cmd, **kw):
    print('+ ' + ' '.join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, cwd=REPO, env=env(), **kw)


def quiet(cmd, check=True):
    return subprocess.run(cmd, check=check, cwd=REPO, env=env(), capture_output=True, text=True)


def env():
    e = dict(os.environ)
    e.setdefault('CONTAINERS_CONF', os.path.join(REPO, 'lab', 'conf', 'containers.conf'))
    e['PATH'] = os.path.join(REPO, '.venv', 'bin') + os.pathsep + e.get('PATH', '')
    return e


def rate_bps(rate):
    """tc rate ('100mbit', '1gbit', '500kbit') in bits per second."""
    m = re.match(r'^(\d+(?:\.\d+)?)([kmg]?)bit$', rate.lower())
    if not m:
        raise SystemExit('bench: --rate must look like 100mbit, 1gbit or 500kbit, not %r' % rate)
    return float(m.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2)]


def wheelhouse():
    import yaml  # pylint: disable=import-outside-toplevel
    path = os.path.join(REPO, 'inventory', 'lab', 'group_vars', 'all', 'generated.yml')
    with open(path) as f:
        gen = yaml.safe_load(f) or {}
    if not gen.get('lab_generated_wheelhouse'):
        raise SystemExit('bench: %s has no lab_generated_wheelhouse (lab/lab.sh up --services-only did not make the wheels)' % path)
    return gen['lab_generated_wheelhouse']


def make_repo(size_mb, shards):
    """Generate the synthetic repository once per (size, shards); return (commit, total bytes, files)."""
    shard_kib = size_mb * 1024 // shards
    params = 'repo=%s shards=%d shard_kib=%d\n' % (REPO_ID, shards, shard_kib)
    params_file = os.path.join(HUB_DATA, '.params')
    revs_file = os.path.join(HUB_DATA, 'revisions.json')
    try:
        with open(params_file) as f:
            same = f.read() == params
        with open(revs_file) as f:
            rev = json.load(f)[REPO_ID]
        same = same and os.path.isdir(os.path.join(HUB_DATA, 'models', REPO_ID, 'commits', rev['commit']))
    except (OSError, ValueError, KeyError):
        same = False
    if not same:
        run([sys.executable, 'lab/hub/make-model.py', '--root', HUB_DATA, '--repo-id', REPO_ID,
             '--shards', str(shards), '--shard-kib', str(shard_kib)], stdout=subprocess.DEVNULL)
        with open(params_file, 'w') as f:
            f.write(params)
        with open(revs_file) as f:
            rev = json.load(f)[REPO_ID]
    return rev['commit'], int(rev['total_bytes']), int(rev['files'])


def start_hub():
    quiet(['podman', 'rm', '-f', '-t', '5', HUB], check=False)
    run(['podman', 'run', '-d', '--name', HUB, '--hostname', HUB, '--label', LAB_LABEL,
         '--label', 'io.inkling.lab.role=bench', '--network', LAB_NETWORK, '--cap-add', 'NET_ADMIN',
         '--stop-signal', 'SIGINT', '--volume', '%s:/opt/hub:ro' % os.path.join(REPO, 'lab', 'hub'),
         '--volume', '%s:/srv/hub:ro' % HUB_DATA, LAB_IMAGE,
         'python3', '/opt/hub/fake_hub.py', '--root', '/srv/hub', '--host', '0.0.0.0', '--port', str(HUB_PORT)],
        stdout=subprocess.DEVNULL)
    for dummy in range(100):
        if quiet(['podman', 'exec', HUB, 'curl', '-sf', 'http://127.0.0.1:%d/_fake/health' % HUB_PORT],
                 check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise SystemExit('bench: %s does not answer; podman logs %s' % (HUB, HUB))


def hub_bytes():
    """Bytes the hub served for the benchmark repository (and in all) since it started."""
    out = quiet(['podman', 'exec', HUB, 'curl', '-sf', 'http://127.0.0.1:%d/_fake/stats' % HUB_PORT]).stdout
    stats = json.loads(out)
    repo = sum(n for key, n in stats['by_path'].items() if key.startswith(REPO_ID + '/'))
    return repo, stats['bytes_served']


def shape(names, rate):
    for name in names:
        quiet(['bash', 'lab/lab.sh', 'shape', name, rate])


def write_inventory(hosts, path):
    inv = {'all': {'children': {'bench_fanout': {
        'hosts': dict((h, {}) for h in hosts),
        'vars': {'ansible_connection': 'containers.podman.podman', 'ansible_python_interpreter': '/usr/bin/python3'}}}}}
    with open(path, 'w') as f:
        json.dump(inv, f, indent=1)


def write_vars(path, wheels, interval):
    data = {'hf_cache_variant': {'name': 'bench', 'model': {'repo_id': REPO_ID, 'revision': 'main'}},
            'hf_cache_endpoint': 'http://%s:%d' % (HUB, HUB_PORT),
            'hf_cache_pip_wheelhouse': wheels,
            'hf_cache_dir': CACHE_DIR,
            'hf_cache_progress_interval_s': interval}
    with open(path, 'w') as f:
        json.dump(data, f, indent=1)


def playbook(inventory, varsfile, hosts, log, extra=()):
    """Run bench/hf_cache_fanout.yml on hosts; its output (with per-task times) goes to log."""
    e = env()
    e['ANSIBLE_CALLBACKS_ENABLED'] = 'ansible.posix.profile_tasks'
    e['PROFILE_TASKS_TASK_OUTPUT_LIMIT'] = 'all'
    cmd = ['ansible-playbook', '-i', inventory, os.path.join('bench', 'hf_cache_fanout.yml'),
           '-e', '@' + varsfile, '--limit', ','.join(hosts)] + list(extra)
    print('+ ' + ' '.join(cmd) + ' > ' + os.path.relpath(log, REPO), file=sys.stderr)
    with open(log, 'w') as out:
        rc = subprocess.run(cmd, cwd=REPO, env=e, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0:
        raise SystemExit('bench: ansible-playbook failed (rc %d); see %s' % (rc, log))


def empty_caches(hosts):
    for host in hosts:
        quiet(['podman', 'exec', host, 'rm', '-rf', CACHE_DIR])


def complete_on(host, commit):
    """Size of the blobs on host when its snapshot carries the completion marker, else None."""
    folder = '%s/models--%s' % (CACHE_DIR, REPO_ID.replace('/', '--'))
    res = quiet(['podman', 'exec', host, 'sh', '-c',
                 'test -f %s/.inkling/%s.complete && test -d %s/snapshots/%s && '
                 'find %s/blobs -type f -printf "%%s\\n" | awk "{s+=\\$1} END {print s+0}"'
                 % (folder, commit, folder, commit, folder)], check=False)
    return int(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip() else None


def measure(name, hosts, inventory, varsfile, commit, total, source):
    empty_caches(hosts)
    before, dummy = hub_bytes()
    log = os.path.join(WORK, '%s-%d.log' % (name, len(hosts)))
    t0 = time.time()
    # The warm-up installed the virtualenv: without a wheelhouse the install step only checks
    # it (the copy of the wheelhouse costs some 30 s per run through the podman connection).
    playbook(inventory, varsfile, hosts, log, ['-e', json.dumps({'hf_cache_source': source, 'hf_cache_pip_wheelhouse': ''})])
    wall = time.time() - t0
    load = os.getloadavg()[0]
    after, dummy = hub_bytes()
    bad = [h for h in hosts if complete_on(h, commit) != total]
    if bad:
        raise SystemExit('bench: %s: no complete snapshot of %d bytes on %s; see %s' % (name, total, ', '.join(bad), log))
    print('%s on %d host(s): wall %.1f s, hub served %d bytes' % (name, len(hosts), wall, after - before), file=sys.stderr)
    return wall, after - before, load


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    ap.add_argument('--hosts', type=int, default=8, help='number of hosts (default 8)')
    ap.add_argument('--size-mb', type=int, default=256, help='snapshot payload in MiB (default 256)')
    ap.add_argument('--shards', type=int, default=4, help='files the payload is split into (default 4)')
    ap.add_argument('--rate', default='100mbit', help='tc rate of every link, hub and hosts (default 100mbit)')
    ap.add_argument('--progress-interval', type=int, default=15, help='hf_cache_progress_interval_s (default 15)')
    ap.add_argument('--keep', action='store_true', help='leave the bench containers running (shaping off)')
    args = ap.parse_args()
    if args.hosts < 2:
        ap.error('--hosts must be at least 2')
    bps = rate_bps(args.rate)
    hosts = ['%s%02d' % (HOST_PREFIX, i + 1) for i in range(args.hosts)]

    run(['bash', 'lab/lab.sh', 'up', '--services-only'], stdout=subprocess.DEVNULL)
    wheels = wheelhouse()
    commit, total, files = make_repo(args.size_mb, args.shards)
    os.makedirs(WORK, exist_ok=True)
    inventory = os.path.join(WORK, 'hosts.yml')
    varsfile = os.path.join(WORK, 'vars.json')
    write_inventory(hosts, inventory)
    write_vars(varsfile, wheels, args.progress_interval)

    results = []
    try:
        start_hub()
        run(['bash', 'lab/scripts/hosts.sh'] + hosts)
        shape([HUB] + hosts, args.rate)
        playbook(inventory, varsfile, hosts, os.path.join(WORK, 'install.log'), ['--tags', 'hf_cache_install'])
        results.append(('hub', 1) + measure('hub', hosts[:1], inventory, varsfile, commit, total, 'hub'))
        results.append(('hub', len(hosts)) + measure('hub', hosts, inventory, varsfile, commit, total, 'hub'))
        results.append(('peer', len(hosts)) + measure('peer', hosts, inventory, varsfile, commit, total, 'peer'))
    finally:
        if args.keep:
            shape([n for n in [HUB] + hosts if quiet(['podman', 'container', 'exists', n], check=False).returncode == 0], 'off')
        else:
            quiet(['podman', 'rm', '-f', '-t', '5', HUB] + hosts, check=False)

    t1 = results[0][2]
    n = len(hosts)
    print('hf_cache staging of %s (%d files, %.1f MB), every link %s (one copy on the wire: %.1f s), %s'
          % (REPO_ID, files, total / 1e6, args.rate, total * 8 / bps, time.strftime('%Y-%m-%d')))
    print('%-6s %6s %10s %9s %12s %12s %8s' % ('mode', 'hosts', 'wall (s)', 'x T1', 'hub MB', 'x snapshot', 'load'))
    for mode, count, wall, served, load in results:
        print('%-6s %6d %10.1f %9.2f %12.1f %12.2f %8.1f'
              % (mode, count, wall, wall / t1, served / 1e6, served / float(total), load))
    peer_wall, peer_served = results[2][2], results[2][3]
    limit = math.log(n, 2) + 1
    print('target: peer wall <= (log2(%d) + 1) x T1 = %.1f x %.1f s = %.1f s: %.1f s (%.2f x T1) %s'
          % (n, limit, t1, limit * t1, peer_wall, peer_wall / t1, 'PASS' if peer_wall <= limit * t1 else 'FAIL'))
    print('target: peer hub bytes == 1 x snapshot (%d): %d (%.2f x) %s'
          % (total, peer_served, peer_served / float(total), 'PASS' if peer_served == total else 'FAIL'))
    print('load: 1-minute load average of this machine (%d CPUs) when the run ended' % os.cpu_count())
    print('playbook logs with per-task times: %s' % os.path.relpath(WORK, REPO))


if __name__ == '__main__':
    main()
