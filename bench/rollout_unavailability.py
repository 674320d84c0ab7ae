#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Per-host unavailability during an image upgrade: this rollout versus a naive one.

Runs in the lab (``make lab-deploy`` first). A new stand-in image with an extra layer of
``--layer-mb`` MB (a new digest, so every host must pull it) is built and pushed to the lab
registry, whose outgoing link can be limited (``--registry-rate``, tc through
``lab/lab.sh shape``). Then, twice, the fleet is put on the old image, a prober inside every
host asks ``/health`` every 100 ms, and the fleet is upgraded to the new image:

* ``rollout``: ``deploy-inkling.yml`` (stage everywhere first, then restart in batches);
* ``naive``: ``bench/naive_rollout.yml`` (per host: stop, pull and stage, start, gate).

It prints each host's unavailable time (the sum of probe intervals that did not get a 200)
and the fleet's total, for both. The target for the rollout is stop + start + gate per
host, with no transfer inside it.

With ``--compare seeding`` it compares instead two upgrades by ``deploy-inkling.yml``, each to a
digest no host has compiled for, with the stand-in's compile delay set to ``--compile-delay``
seconds (``lab_standin_compile_delay_s``): ``unseeded`` (``rollout_cache_seed=false``: every host
compiles), then ``seeded`` (hosts after the first of their cache key copy its caches,
docs/warm-restarts.md). Target: the unavailability of each host after the
canary with the canary's key at most 30% of the canary's.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROBE = r'''
import os, sys, time, urllib.request
out = open("/tmp/inkling-bench-probe.log", "w", buffering=1)
end = time.time() + float(sys.argv[1])
while time.time() < end and not os.path.exists("/tmp/inkling-bench-probe.stop"):
    t = time.time()
    try:
        code = urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=0.5).getcode()
    except Exception:
        code = 0
    out.write("%.3f %d\n" % (t, code))
    time.sleep(max(0.0, 0.1 - (time.time() - t)))
'''


def run(cmd, **kw):
    print('+ ' + ' '.join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, cwd=REPO, **kw)


def env():
    e = dict(os.environ)
    e.setdefault('CONTAINERS_CONF', os.path.join(REPO, 'lab', 'conf', 'containers.conf'))
    e['PATH'] = os.path.join(REPO, '.venv', 'bin') + os.pathsep + e.get('PATH', '')
    return e


def fleet_hosts(inventory):
    out = subprocess.run(['ansible-inventory', '-i', inventory, '--list'], check=True, cwd=REPO,
                         capture_output=True, text=True, env=env()).stdout
    data = json.loads(out)
    hosts = list(data.get('inkling_fleet', {}).get('hosts', []))  # a molecule inventory lists them directly
    for group in data.get('inkling_fleet', {}).get('children', []):
        hosts += data.get(group, {}).get('hosts', [])
    return sorted(set(hosts))


def lab_setting(key):
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, 'inventory', 'lab', 'group_vars', 'all', 'lab.yml')) as f:
        return yaml.safe_load(f)[key]


def generated():
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, 'inventory', 'lab', 'group_vars', 'all', 'generated.yml')) as f:
        return yaml.safe_load(f)


def build_and_push_next(layer_mb, base='localhost/inkling-vllm-standin:lab'):
    """Build the stand-in with an extra layer (a new digest) and push it; return its digest."""
    ctx = tempfile.mkdtemp(prefix='inkling-bench-')
    with open(os.path.join(ctx, 'blob'), 'wb') as f:
        f.write(os.urandom(layer_mb * 1024 * 1024))
    with open(os.path.join(ctx, 'Containerfile'), 'w') as f:
        f.write('FROM %s\nCOPY blob /opt/inkling-bench-blob\n' % base)
    run(['podman', 'build', '-q', '-t', 'localhost/inkling-vllm-standin:bench', ctx], env=env(),
        stdout=subprocess.DEVNULL)
    registry = '127.0.0.1:5000'
    digestfile = os.path.join(ctx, 'digest')
    run(['podman', 'push', '--quiet', '--cert-dir', os.path.join(REPO, 'lab', '.state', 'pki', 'certs.d', registry),
         '--creds', '%s:%s' % (lab_setting('lab_registry_username'), lab_setting('lab_registry_password')),
         '--digestfile', digestfile, 'localhost/inkling-vllm-standin:bench',
         '%s/%s:bench' % (registry, generated()['lab_generated_standin_image'].split('/', 1)[1])], env=env())
    with open(digestfile) as f:
        return f.read().strip()


SERIAL = [1]


def overrides_file(digest, tag, path, extra=None):
    """Vars file pointing every lab variant at the stand-in image with the given digest."""
    import yaml  # pylint: disable=import-outside-toplevel
    gen = generated()
    image = {'reference': '%s:%s' % (gen['lab_generated_standin_image'], tag), 'digest': digest}
    model = {'revision': gen['lab_generated_model_revision'], 'size_bytes': int(gen['lab_generated_model_size_bytes'])}
    # every entry of the lab's table (inventory/lab): an -e layer replaces the inventory's, and play 0 refuses an
    # entry that runs remote code from a branch (docs/variants.md, "Pinned revisions")
    names = ['sm90-patched', 'sm90-upstream', 'sm100', 'sm90-small-tp2', 'sm100-small-tp2', 'sm90-h100-2node']
    data = {'inkling_variant_overrides': dict((n, {'image': image, 'model': model}) for n in names),
            'rollout_serial': SERIAL, 'rollout_report_dir': os.path.join(os.path.dirname(path), 'reports')}
    data.update(extra or {})
    with open(path, 'w') as f:
        yaml.safe_dump(data, f)
    return path


LIMIT = []


def playbook(inventory, book, varsfile):
    extra = ['-e', 'rollout_hosts=' + ','.join(LIMIT)] if LIMIT else []
    run(['ansible-playbook', '-i', inventory, book, '-e', '@' + varsfile] + extra, env=env(),
        stdout=subprocess.DEVNULL)


def remove_image(hosts, digest):
    for host in hosts:
        subprocess.run(['podman', 'exec', host, 'sh', '-c',
                        'podman rmi -f $(podman images -q --digests --filter reference=*/inkling/vllm-standin '
                        '--format "{{.Digest}} {{.ID}}" | awk \'$1=="%s"{print $2}\') 2>/dev/null; true' % digest],
                       check=False, env=env(), capture_output=True)


def probes_start(hosts, max_s):
    for host in hosts:
        subprocess.run(['podman', 'exec', host, 'rm', '-f', '/tmp/inkling-bench-probe.stop'], check=True, env=env())
        subprocess.run(['podman', 'exec', '-d', host, 'python3', '-c', PROBE, str(max_s)], check=True, env=env())


def probes_stop(hosts):
    result = {}
    for host in hosts:
        subprocess.run(['podman', 'exec', host, 'touch', '/tmp/inkling-bench-probe.stop'], check=True, env=env())
    time.sleep(0.5)
    for host in hosts:
        out = subprocess.run(['podman', 'exec', host, 'cat', '/tmp/inkling-bench-probe.log'], check=True,
                             env=env(), capture_output=True, text=True).stdout
        samples = [(float(t), int(c)) for t, c in (line.split() for line in out.splitlines() if line.strip())]
        down = 0.0
        for (t0, c0), (t1, dummy) in zip(samples, samples[1:]):
            if c0 != 200:
                down += t1 - t0
        result[host] = round(down, 1)
    return result


def measure(name, inventory, hosts, book, varsfile, max_s):
    probes_start(hosts, max_s)
    t0 = time.time()
    playbook(inventory, book, varsfile)
    wall = time.time() - t0
    down = probes_stop(hosts)
    print('%s: wall %.1f s' % (name, wall), file=sys.stderr)
    return wall, down


def remove_cache_sets(hosts, digest):
    """Every host loses its cache sets of this digest (so the next start of it is cold)."""
    for host in hosts:
        subprocess.run(['podman', 'exec', host, 'sh', '-c', 'rm -rf /var/lib/inkling/cache/*/%s' % digest.split(':')[-1]],
                       check=True, env=env())


def journal(varsfile):
    with open(os.path.join(os.path.dirname(varsfile), 'reports', 'journal.json')) as f:
        return json.load(f)


def compare_seeding(args, hosts, old_digest, new_digest, work):
    """Cold versus seeded: an upgrade to a new digest with rollout_cache_seed false, then, from
    there, an upgrade to another new digest with rollout_cache_seed true (no put-back in between:
    each upgrade meets empty cache sets on every host)."""
    delay = {'lab_standin_compile_delay_s': args.compile_delay}
    deploy = os.path.join(REPO, 'deploy-inkling.yml')
    digests = {'unseeded': new_digest, 'seeded': build_and_push_next(args.layer_mb, args.base_image)}
    results, journals = {}, {}
    try:
        for name, seed in (('unseeded', False), ('seeded', True)):
            new_vars = overrides_file(digests[name], 'bench', os.path.join(work, 'new-%s.yml' % name),
                                      dict(delay, rollout_cache_seed=seed))
            remove_cache_sets(hosts, digests[name])  # no host has a compile cache for it
            results[name] = measure(name, args.inventory, hosts, deploy, new_vars, args.max_s)
            journals[name] = journal(new_vars)
    finally:
        if not args.no_restore:
            playbook(args.inventory, deploy, overrides_file(old_digest, 'lab', os.path.join(work, 'back.yml')))
    jh = journals['seeded']['hosts']
    order = sorted(hosts, key=lambda h: (jh[h].get('restarts') or [{}])[-1].get('t_stop') or 0)
    canary = order[0]

    def key(h):
        return (jh[h].get('warm') or {}).get('cache_key', '')

    print('upgrade to a new image, stand-in compile delay %d s, %d hosts, serial %s (batch order)'
          % (args.compile_delay, len(hosts), json.dumps(SERIAL)))
    print('%-18s %-17s %-18s %14s %14s' % ('host', 'cache key', 'seeded from', 'unseeded (s)', 'seeded (s)'))
    for host in order:
        print('%-18s %-17s %-18s %14.1f %14.1f' % (host, key(host), (jh[host].get('warm') or {}).get('seeded_from') or '-',
                                                   results['unseeded'][1][host], results['seeded'][1][host]))
    print('%-18s %-17s %-18s %14.1f %14.1f' % ('fleet total', '', '', sum(results['unseeded'][1].values()),
                                               sum(results['seeded'][1].values())))
    print('%-18s %-17s %-18s %14.1f %14.1f' % ('wall time', '', '', results['unseeded'][0], results['seeded'][0]))
    base = results['seeded'][1][canary]
    ok = True
    for host in order[1:]:
        if key(host) != key(canary):
            continue
        ratio = results['seeded'][1][host] / base if base else float('inf')
        ok = ok and ratio <= 0.30
        print('%s (canary key) seeded: %.0f%% of the canary %s (target <= 30%%)' % (host, 100 * ratio, canary))
    print('target %s' % ('met' if ok else 'NOT met'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    ap.add_argument('--inventory', default='inventory/lab')
    ap.add_argument('--layer-mb', type=int, default=64, help='size of the new image layer to pull (MB)')
    ap.add_argument('--registry-rate', default='80mbit', help="tc rate of the registry's link, or 'off'")
    ap.add_argument('--max-s', type=float, default=1800, help='longest time a prober runs')
    ap.add_argument('--compare', choices=['naive', 'seeding'], default='naive',
                    help='naive: this rollout versus naive_rollout.yml; seeding: unseeded versus seeded caches')
    ap.add_argument('--compile-delay', type=int, default=60, help='--compare seeding: the stand-in compile delay (s)')
    ap.add_argument('--base-image', default='localhost/inkling-vllm-standin:lab',
                    help='local stand-in image the new one is built from')
    ap.add_argument('--serial', default='[1]', help='rollout_serial, as JSON (default [1])')
    ap.add_argument('--no-restore', action='store_true', help='leave the fleet on the new image')
    ap.add_argument('--hosts', default='', help='comma-separated hosts to upgrade (rollout_hosts; default: all)')
    ap.add_argument('--quick', action='store_true',
                    help='one host, an 8 MB layer at 100mbit, no put-back at the end (what CI runs: both '
                         'playbooks end to end, minutes)')
    args = ap.parse_args()
    SERIAL[:] = json.loads(args.serial)

    hosts = fleet_hosts(args.inventory)
    if args.quick:
        args.layer_mb, args.registry_rate, args.max_s, args.no_restore = 8, '100mbit', 900, True
        args.hosts = args.hosts or hosts[0]
    if args.hosts:
        LIMIT[:] = args.hosts.split(',')
        unknown = sorted(set(LIMIT) - set(hosts))
        if unknown:
            ap.error('--hosts: not in %s: %s' % (args.inventory, ', '.join(unknown)))
        hosts = [h for h in hosts if h in LIMIT]
    gen = generated()
    old_digest = gen['lab_generated_standin_digest_lab']
    work = tempfile.mkdtemp(prefix='inkling-bench-')
    new_digest = build_and_push_next(args.layer_mb, args.base_image)
    if args.compare == 'seeding':
        compare_seeding(args, hosts, old_digest, new_digest, work)
        return
    old_vars = overrides_file(old_digest, 'lab', os.path.join(work, 'old.yml'))
    new_vars = overrides_file(new_digest, 'bench', os.path.join(work, 'new.yml'))
    deploy = os.path.join(REPO, 'deploy-inkling.yml')
    naive = os.path.join(REPO, 'bench', 'naive_rollout.yml')

    if args.registry_rate != 'off':
        run(['bash', 'lab/lab.sh', 'shape', 'lab-registry', args.registry_rate], env=env())
    try:
        results = {}
        for name, book in (('rollout', deploy), ('naive', naive)):
            playbook(args.inventory, deploy, old_vars)  # every host serves the old image
            remove_image(hosts, new_digest)  # and has to pull the new one
            results[name] = measure(name, args.inventory, hosts, book, new_vars, args.max_s)
    finally:
        if args.registry_rate != 'off':
            subprocess.run(['bash', 'lab/lab.sh', 'shape', 'lab-registry', 'off'], cwd=REPO, env=env(), check=False)
        if not args.no_restore:
            playbook(args.inventory, deploy, old_vars)

    print('upgrade to a new image (+%d MB layer, registry link %s), %d hosts, serial %s'
          % (args.layer_mb, args.registry_rate, len(hosts), json.dumps(SERIAL)))
    print('%-16s %14s %14s' % ('host', 'rollout (s)', 'naive (s)'))
    for host in hosts:
        print('%-16s %14.1f %14.1f' % (host, results['rollout'][1][host], results['naive'][1][host]))
    print('%-16s %14.1f %14.1f' % ('fleet total', sum(results['rollout'][1].values()), sum(results['naive'][1].values())))
    print('%-16s %14.1f %14.1f' % ('wall time', results['rollout'][0], results['naive'][0]))


if __name__ == '__main__':
    main()
