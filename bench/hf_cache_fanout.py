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
(``lab/lab.sh shape``), so the hub's link and every host's link have the same capacity; packets under
128 bytes (ACKs) go ahead of queued data, roughly as a real host's fq_codel treats ACKs
(``LAB_SHAPE_FIFO=1`` in the environment: one shared FIFO, as before 2026-12-02).
After one warm-up (the staging virtualenv, ``--tags hf_cache_install``), it stages the
snapshot with ``bench/hf_cache_fanout.yml`` into an emptied cache three times:

* ``hub`` on one host: T1, one host's transfer time (the unit of the target);
* ``hub`` on all hosts (only with ``--hub-all``): every host downloads from the hub, which shares its link;
* ``peer`` on all hosts, ``--runs`` times (default 3): one seed downloads, every other host receives each
  file from the host before it in the relay (a chain with ``--degree 1``) as soon as that host verified it;
* ``peer`` once more with one relay (``--kill``, default the 4th host) killed (``podman kill``) once it holds
  ``--kill-at`` of the blobs: the hosts behind it switch to another source.

It prints the playbook's wall time, its ratio to T1, the bytes the hub served for the repository, the
schedule model's prediction (``plugins/module_utils/hf_fanout.py``: the measured T1 plus what the model adds
for the relay, plus Ansible's extra tasks on every host, calibrated on this controller by the same task's time on
every host in the warm-up and on one host in T1) beside each measurement, checks that every host (but the killed one) ended with a complete
snapshot, prints the targets of issue 19 (``peer`` median at most 1.25 x T1, the hub serving the snapshot
exactly once, the killed-relay run within 2 x T1, the model within 15 %), and the model's predictions for 64,
256 and 1,024 hosts. A missed target is reported, not an error: this is a benchmark.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import re
import subprocess
import statistics
import sys
import threading
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
# the relay's fixed costs per rsync connection of a receiver (connect, authenticate; a receiver behind its
# source takes every blob the source holds in one), per file (the rename, the end of the hash) and per hop
# (half the receiver's 0.5 s poll and a listing), measured on the lab: see bench/history.md
PER_CONNECTION_S = 0.15
PER_FILE_S = 0.02
PER_HOP_S = 0.4
# the relay beside each daemon (hf_cache_peer_relay_port, module_utils/hf_peer_relay.py): a receiver streams a
# blob while its source still receives it, so a hop lags by a piece: the seed's downloader writes 1 MiB at a time
# (hf_download's chunk) and the relay sends what is on disk, at most 1 MiB at a time. Its per-hop delay is the
# two 10 ms polls of the code (the relay's look at a file that did not grow, the receiver's wait for a source),
# its connection cost one TCP connection and an HMAC per blob: the code's figures, not measured apart.
RELAY_PIECE = 1024 * 1024
RELAY_HOP_S = 0.02
RELAY_CONNECTION_S = 0.01
# Ansible's part of the wall time that T1 does not pay: the peer path's module tasks on every host. Each task
# waits for every host, and one task on N hosts costs this controller more than on one (the podman connection
# runs several podman commands per module run). Calibrated per run of the bench: the same task (the local check,
# which also reads the staging environment's huggingface_hub version) on N hosts in the warm-up and on one host
# in T1. SHARED: module tasks both paths run, here on every host (the local check with the cache directory and
# the address); PEER_ONLY: tasks only the peer path runs on (nearly) every host (start the daemons, start the
# copies, stop the daemons). See roles/hf_cache/tasks/stage_peer.yml.
CALIBRATION_TASK = 'Verify the snapshot this host holds against its manifest (no hub contact)'
ANSIBLE_SHARED_TASKS = 1
ANSIBLE_PEER_ONLY_TASKS = 3

sys.path.insert(0, os.path.join(REPO, 'collections'))
from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout  # noqa: E402  pylint: disable=wrong-import-position


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
    """Start the hub double; return the address the controller reaches it at (a port published on 127.0.0.1)."""
    quiet(['podman', 'rm', '-f', '-t', '5', HUB], check=False)
    run(['podman', 'run', '-d', '--name', HUB, '--hostname', HUB, '--label', LAB_LABEL,
         '--publish', '127.0.0.1::%d' % HUB_PORT,
         '--label', 'io.inkling.lab.role=bench', '--network', LAB_NETWORK, '--cap-add', 'NET_ADMIN',
         '--stop-signal', 'SIGINT', '--volume', '%s:/opt/hub:ro' % os.path.join(REPO, 'lab', 'hub'),
         '--volume', '%s:/srv/hub:ro' % HUB_DATA, LAB_IMAGE,
         'python3', '/opt/hub/fake_hub.py', '--root', '/srv/hub', '--host', '0.0.0.0', '--port', str(HUB_PORT)],
        stdout=subprocess.DEVNULL)
    for dummy in range(100):
        if quiet(['podman', 'exec', HUB, 'curl', '-sf', 'http://127.0.0.1:%d/_fake/health' % HUB_PORT],
                 check=False).returncode == 0:
            # the double hashes a repository's files on its first request (a real hub answers from its index):
            # ask once now, so that T1's plan does not pay it (4 to 22 s seen before 2026-12-02)
            quiet(['podman', 'exec', HUB, 'curl', '-sf', '--max-time', '300', '-o', '/dev/null',
                   'http://127.0.0.1:%d/api/models/%s/revision/main' % (HUB_PORT, REPO_ID)])
            port = quiet(['podman', 'port', HUB, '%d/tcp' % HUB_PORT]).stdout.strip().splitlines()[0]
            return 'http://%s' % port
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


def write_vars(path, wheels, interval, controller_endpoint, degree, switch_after, relay=True):
    data = {'hf_cache_peer_files_endpoint': controller_endpoint, 'hf_cache_peer_relay_degree': degree,
            'hf_cache_peer_relay_port': 8874 if relay else 0,
            'hf_cache_peer_switch_after_s': switch_after, 'hf_cache_variant': {'name': 'bench', 'model': {'repo_id': REPO_ID, 'revision': 'main'}},
            'hf_cache_endpoint': 'http://%s:%d' % (HUB, HUB_PORT),
            'hf_cache_pip_wheelhouse': wheels,
            'hf_cache_dir': CACHE_DIR,
            'hf_cache_progress_interval_s': interval}
    with open(path, 'w') as f:
        json.dump(data, f, indent=1)


def playbook(inventory, varsfile, hosts, log, extra=(), may_fail=False):
    """Run bench/hf_cache_fanout.yml on hosts; its output (with per-task times) goes to log."""
    e = env()
    e['ANSIBLE_CALLBACKS_ENABLED'] = 'ansible.posix.profile_tasks'
    e['PROFILE_TASKS_TASK_OUTPUT_LIMIT'] = 'all'
    cmd = ['ansible-playbook', '-i', inventory, os.path.join('bench', 'hf_cache_fanout.yml'),
           '-e', '@' + varsfile, '--limit', ','.join(hosts)] + list(extra)
    print('+ ' + ' '.join(cmd) + ' > ' + os.path.relpath(log, REPO), file=sys.stderr)
    with open(log, 'w') as out:
        rc = subprocess.run(cmd, cwd=REPO, env=e, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0 and not may_fail:
        raise SystemExit('bench: ansible-playbook failed (rc %d); see %s' % (rc, log))
    return rc


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


def blob_count(host):
    res = quiet(['podman', 'exec', host, 'sh', '-c', 'ls %s/models--%s/blobs 2>/dev/null | grep -vc incomplete'
                 % (CACHE_DIR, REPO_ID.replace('/', '--'))], check=False)
    try:
        return int(res.stdout.strip() or 0)
    except ValueError:
        return 0


def killer(host, blobs_at, events):
    """Kill host (podman kill) once it holds blobs_at blobs; record when."""
    def run_():
        t0 = time.time()
        while time.time() - t0 < 900:
            if blob_count(host) >= blobs_at:
                quiet(['podman', 'kill', host], check=False)
                events.append(('killed', host, time.time() - t0, blobs_at))
                return
            time.sleep(0.2)
    th = threading.Thread(target=run_)
    th.daemon = True
    return th


def measure(name, hosts, inventory, varsfile, commit, total, source, tag='', kill=None):
    empty_caches(hosts)
    before, dummy = hub_bytes()
    log = os.path.join(WORK, '%s-%d%s.log' % (name, len(hosts), tag))
    events = []
    th = killer(kill[0], kill[1], events) if kill else None
    t0 = time.time()
    if th:
        th.start()
    # The warm-up installed the virtualenv: without a wheelhouse the install step only checks
    # it (the copy of the wheelhouse costs some 30 s per run through the podman connection).
    rc = playbook(inventory, varsfile, hosts, log, ['-e', json.dumps({'hf_cache_source': source, 'hf_cache_pip_wheelhouse': ''})],
                  may_fail=bool(kill))
    wall = time.time() - t0
    load = os.getloadavg()[0]
    after, dummy = hub_bytes()
    if kill:
        th.join(1)
        if not events:
            raise SystemExit('bench: %s was never killed (it never held %d blobs); see %s' % (kill[0], kill[1], log))
        print('%s killed %.1f s into the run, holding %d blobs; playbook rc %d' % (kill[0], events[0][2], kill[1], rc),
              file=sys.stderr)
        hosts = [h for h in hosts if h != kill[0]]
    bad = [h for h in hosts if complete_on(h, commit) != total]
    if bad:
        raise SystemExit('bench: %s: no complete snapshot of %d bytes on %s; see %s' % (name, total, ', '.join(bad), log))
    print('%s on %d host(s): wall %.1f s, hub served %d bytes' % (name, len(hosts), wall, after - before), file=sys.stderr)
    return wall, after - before, load, relay_seconds(log)


def task_seconds(log):
    """{task name: seconds} from the profile_tasks recap at the end of a playbook log."""
    out = {}
    with open(log) as f:
        text = f.read()
    recap = text.split('TASKS RECAP', 1)[-1]
    for m in re.finditer(r'^[\w.]+ : (.+?) -+ ([\d.]+)s\s*$', recap, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def ansible_extra(hosts):
    """(seconds, cost on N hosts, cost on one): Ansible's extra wall time of a peer run on len(hosts) hosts over T1,
    from the calibration task's time on every host (the warm-up) and on one (T1)."""
    many = task_seconds(os.path.join(WORK, 'install.log')).get(CALIBRATION_TASK)
    one = task_seconds(os.path.join(WORK, 'hub-1.log')).get(CALIBRATION_TASK)
    if many is None or one is None:
        return 0.0, None, None
    return ANSIBLE_SHARED_TASKS * max(many - one, 0.0) + ANSIBLE_PEER_ONLY_TASKS * many, many, one


def relay_seconds(log):
    """(first, last, waited, connections): the shortest and the longest receiver job of a peer run (from its start
    to its verified snapshot), the seconds the shortest one waited for its source and the rsync connections that
    brought its blobs (one per batch), from the log. The receivers'
    jobs start in the task after the seed's download: the first receiver copies from the seed while the seed
    downloads, so its wait is the sign that the relay runs beside the hub download."""
    with open(log) as f:
        text = re.sub(r'\s+', ' ', f.read())
    jobs = [(int(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None) for m in re.finditer(
        r"against the hub'+s hashes \(\d+ blobs, [^)]*\) in (\d+) s, (\d+) s of it waiting"
        r"(?: for a source, in (\d+) (?:rsync )?connection)?", text)]
    if not jobs:
        return None
    return min(j[0] for j in jobs), max(j[0] for j in jobs), min(jobs)[1], min(jobs)[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    ap.add_argument('--hosts', type=int, default=8, help='number of hosts (default 8)')
    ap.add_argument('--size-mb', type=int, default=768, help='snapshot payload in MiB (default 768)')
    ap.add_argument('--shards', type=int, default=96,
                    help='equal shards the payload is split into (default 96, the real snapshot has some 119)')
    ap.add_argument('--runs', type=int, default=3, help='peer runs, the median is the figure (default 3)')
    ap.add_argument('--degree', type=int, default=1, help='hf_cache_peer_relay_degree (default 1, a chain)')
    ap.add_argument('--switch-after', type=int, default=15, help='hf_cache_peer_switch_after_s (default 15)')
    ap.add_argument('--kill', type=int, default=4, help='the relay host killed in the last run, 1-based; 0: none')
    ap.add_argument('--kill-at', type=float, default=0.4, help='kill it once it holds this share of the blobs')
    ap.add_argument('--hub-all', action='store_true', help='also measure hub on every host')
    ap.add_argument('--no-relay', action='store_true',
                    help='hf_cache_peer_relay_port 0: whole blobs by rsync only (what the role did before the relay)')
    ap.add_argument('--no-lab-up', action='store_true',
                    help='do not run lab/lab.sh up --services-only (the lab services run, started from another checkout)')
    ap.add_argument('--rate', default='50mbit', help='tc rate of every link, hub and hosts (default 50mbit)')
    ap.add_argument('--progress-interval', type=int, default=15, help='hf_cache_progress_interval_s (default 15)')
    ap.add_argument('--keep', action='store_true', help='leave the bench containers running (shaping off)')
    ap.add_argument('--quick', action='store_true',
                    help='2 hosts, 16 MiB in 8 files at 200mbit, one peer run, no kill (what CI runs: the same '
                         'steps and the completeness checks, about two minutes)')
    args = ap.parse_args()
    if args.quick:
        args.hosts, args.size_mb, args.shards, args.runs, args.kill = 2, 16, 8, 1, 0
        args.rate, args.progress_interval = '200mbit', 5
    if args.hosts < 2:
        ap.error('--hosts must be at least 2')
    bps = rate_bps(args.rate)
    hosts = ['%s%02d' % (HOST_PREFIX, i + 1) for i in range(args.hosts)]

    if not args.no_lab_up:
        run(['bash', 'lab/lab.sh', 'up', '--services-only'], stdout=subprocess.DEVNULL)
    wheels = wheelhouse()
    commit, total, files = make_repo(args.size_mb, args.shards)
    os.makedirs(WORK, exist_ok=True)
    inventory = os.path.join(WORK, 'hosts.yml')
    varsfile = os.path.join(WORK, 'vars.json')
    write_inventory(hosts, inventory)

    results = []
    try:
        endpoint = start_hub()
        write_vars(varsfile, wheels, args.progress_interval, endpoint, args.degree, args.switch_after,
                   not args.no_relay)
        run(['bash', 'lab/scripts/hosts.sh'] + hosts)
        shape([HUB] + hosts, args.rate)
        playbook(inventory, varsfile, hosts, os.path.join(WORK, 'install.log'), ['--tags', 'hf_cache_install'])
        results.append(('hub', 1, '') + measure('hub', hosts[:1], inventory, varsfile, commit, total, 'hub'))
        if args.hub_all:
            results.append(('hub', len(hosts), '') + measure('hub', hosts, inventory, varsfile, commit, total, 'hub'))
        for i in range(args.runs):
            results.append(('peer', len(hosts), '') + measure('peer', hosts, inventory, varsfile, commit, total, 'peer',
                                                              tag='-run%d' % (i + 1)))
        if args.kill:
            victim = hosts[args.kill - 1]
            at = max(int(round(files * args.kill_at)), 1)
            try:
                results.append(('peer', len(hosts), 'kill %s' % victim) + measure(
                    'peer', hosts, inventory, varsfile, commit, total, 'peer', tag='-kill', kill=(victim, at)))
            except SystemExit as exc:      # report what was measured, and this
                print('bench: the run with %s killed did not complete: %s' % (victim, exc))
    finally:
        if args.keep:
            shape([n for n in [HUB] + hosts if quiet(['podman', 'container', 'exists', n], check=False).returncode == 0], 'off')
        else:
            quiet(['podman', 'rm', '-f', '-t', '5', HUB] + hosts, check=False)

    report(results, hosts, args, files, total, bps, file_sizes(commit))


def file_sizes(commit):
    """Sizes of the synthetic snapshot's files, in path order (what the hub double serves)."""
    top = os.path.join(HUB_DATA, 'models', REPO_ID, 'commits', commit)
    out = []
    for base, dummy, names in os.walk(top):
        for name in names:
            out.append((os.path.relpath(os.path.join(base, name), top), os.path.getsize(os.path.join(base, name))))
    return [size for dummy, size in sorted(out)]


def costs(args, per_file_s=PER_FILE_S):
    """The model's parameters for the relay measured: pieces by the relay, or whole blobs by rsync."""
    if args.no_relay:
        return {'per_file_s': per_file_s, 'per_hop_s': PER_HOP_S, 'per_connection_s': PER_CONNECTION_S}
    return {'per_file_s': per_file_s, 'per_hop_s': RELAY_HOP_S, 'per_connection_s': RELAY_CONNECTION_S,
            'piece_bytes': RELAY_PIECE}


def model(hosts, args, sizes, degree=None):
    """The schedule model for this snapshot, every link args.rate."""
    return hf_fanout.schedule(hosts, sizes, rate_bps(args.rate), degree=degree or args.degree, **costs(args))


def report(results, hosts, args, files, total, bps, sizes):
    t1 = results[0][3]
    n = len(hosts)
    one = model(1, args, sizes)
    pred = model(n, args, sizes)
    extra, per_task_n, per_task_1 = ansible_extra(hosts)
    predicted = t1 + pred['makespan_s'] - one['makespan_s'] + extra
    print('hf_cache staging of %s (%d files, %.1f MB), every link %s%s (one copy on the wire: %.1f s), relay degree %d, '
          '%s, %s' % (REPO_ID, files, total / 1e6, args.rate,
                      ', one FIFO' if os.environ.get('LAB_SHAPE_FIFO') == '1' else ', ACKs first',
                      total * 8 / bps, args.degree, 'whole blobs by rsync' if args.no_relay else 'pieces by the relay',
                      time.strftime('%Y-%m-%d')))
    print('%-6s %6s %-22s %9s %7s %10s %11s %10s %6s'
          % ('mode', 'hosts', 'case', 'wall (s)', 'x T1', 'hub MB', 'x snapshot', 'model (s)', 'load'))
    for mode, count, case, wall, served, load, dummy in results:
        mpred = t1 if count == 1 else (predicted if mode == 'peer' else float('nan'))
        print('%-6s %6d %-22s %9.1f %7.2f %10.1f %11.2f %10.1f %6.1f'
              % (mode, count, case or '-', wall, wall / t1, served / 1e6, served / float(total), mpred, load))
    peers = [r for r in results if r[0] == 'peer' and not r[2]]
    if peers:
        walls = [r[3] for r in peers]
        med = statistics.median(walls)
        print('target: peer median wall <= 1.25 x T1 = %.1f s: runs %s, median %.1f s (%.2f x T1) %s'
              % (1.25 * t1, ', '.join('%.1f' % w for w in walls), med, med / t1, 'PASS' if med <= 1.25 * t1 else 'FAIL'))
        served = [r[4] for r in peers]
        print('target: peer hub bytes == 1.00 x snapshot (%d): %s %s'
              % (total, ', '.join('%.2f x' % (b / float(total)) for b in served),
                 'PASS' if all(b == total for b in served) else 'FAIL'))
        relays = [r[6] for r in peers if r[6]]
        if relays:
            # the receivers' jobs start in the task after the seed's download (the relay overlaps it).
            # Calibrated: the fixed cost per file from the first receiver's job (one hop behind the seed).
            first = statistics.median([x[0] for x in relays])
            wire = sum(sizes) * 8 / rate_bps(args.rate)
            per_file = max((first - wire) / len(sizes), 0.0)
            print('first receiver: jobs of %s s, of which %s s waiting for the seed (it copies while the seed '
                  'downloads); %s connections for %d blobs'
                  % (', '.join('%d' % x[0] for x in relays), ', '.join('%d' % x[2] for x in relays),
                     ', '.join('-' if x[3] is None else '%d' % x[3] for x in relays), len(sizes)))
            for label, kw in (('model', costs(args)),
                              ('model calibrated (%.2f s per file)' % per_file, dict(costs(args, per_file),
                                                                                     per_connection_s=0.0))):
                ready = hf_fanout.schedule(n, sizes, rate_bps(args.rate), degree=args.degree, **kw)['makespan_s']
                rmed = statistics.median([x[1] for x in relays])
                print('relay (the last receiver\'s job, started with the seed\'s download): runs %s, median %.0f s; '
                      '%s %.1f s, %.0f%% off %s' % (', '.join('%d' % x[1] for x in relays), rmed, label, ready,
                                                    100 * abs(ready - rmed) / rmed,
                                                    'PASS' if abs(ready - rmed) <= 0.15 * rmed else 'FAIL'))
        err = abs(predicted - med) / med
        relay = pred['makespan_s'] - one['makespan_s']
        print('target: model within 15%% of the median: predicted %.1f s (T1 %.1f s + relay %.1f s + Ansible %.1f s), '
              'measured %.1f s, %.0f%% off %s'
              % (predicted, t1, relay, extra, med, 100 * err, 'PASS' if err <= 0.15 else 'FAIL'))
        if per_task_n is not None:
            print('Ansible: one module task took %.1f s on %d hosts (warm-up) and %.1f s on one (T1): %d tasks on every '
                  'host instead of one, %d more on every host: %.1f s'
                  % (per_task_n, n, per_task_1, ANSIBLE_SHARED_TASKS, ANSIBLE_PEER_ONLY_TASKS, extra))
    kills = [r for r in results if r[2]]
    for r in kills:
        print('target: with %s, every other host complete within 2 x T1 = %.1f s: %.1f s (%.2f x T1) %s'
              % (r[2], 2 * t1, r[3], r[3] / t1, 'PASS' if r[3] <= 2 * t1 else 'FAIL'))
    print('model (transfer only, no Ansible; T1 = %.1f s on the wire here): hosts, chain x T1, best degree (x T1)'
          % one['makespan_s'])
    for count in (8, 64, 256, 1024):
        best, preds = hf_fanout.best_degree(count, sizes, rate_bps(args.rate), **costs(args))
        print('  %5d hosts: chain %.2f x, best degree %d: %.2f x'
              % (count, preds[1] / one['makespan_s'], best, preds[best] / one['makespan_s']))
    print('load: 1-minute load average of this machine (%d CPUs) when the run ended' % os.cpu_count())
    print('playbook logs with per-task times: %s' % os.path.relpath(WORK, REPO))


if __name__ == '__main__':
    main()
