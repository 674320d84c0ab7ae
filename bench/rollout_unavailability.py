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
    hosts = []
    for group in data.get('inkling_fleet', {}).get('children', []):
        hosts += data.get(group, {}).get('hosts', [])
    return sorted(hosts)


def lab_setting(key):
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, 'inventory', 'lab', 'group_vars', 'all', 'lab.yml')) as f:
        return yaml.safe_load(f)[key]


def generated():
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, 'inventory', 'lab', 'group_vars', 'all', 'generated.yml')) as f:
        return yaml.safe_load(f)


def build_and_push_next(layer_mb):
    """Build the stand-in with an extra layer (a new digest) and push it; return its digest."""
    ctx = tempfile.mkdtemp(prefix='inkling-bench-')
    with open(os.path.join(ctx, 'blob'), 'wb') as f:
        f.write(os.urandom(layer_mb * 1024 * 1024))
    with open(os.path.join(ctx, 'Containerfile'), 'w') as f:
        f.write('FROM localhost/inkling-vllm-standin:lab\nCOPY blob /opt/inkling-bench-blob\n')
    run(['podman', 'build', '-q', '-t', 'localhost/inkling-vllm-standin:bench', ctx], env=env(),
        stdout=subprocess.DEVNULL)
    registry = '127.0.0.1:5000'
    digestfile = os.path.join(ctx, 'digest')
    run(['podman', 'push', '--quiet', '--cert-dir', os.path.join(REPO, 'lab', '.state', 'pki', 'certs.d', registry),
         '--creds', '%s:%s' % (lab_setting('lab_registry_username'), lab_setting('lab_registry_password')),
         '--digestfile', digestfile, 'localhost/inkling-vllm-standin:bench',
         '%s/inkling/vllm-standin:bench' % registry], env=env())
    with open(digestfile) as f:
        return f.read().strip()


def overrides_file(digest, tag, path):
    """Vars file pointing every lab variant at the stand-in image with the given digest."""
    import yaml  # pylint: disable=import-outside-toplevel
    gen = generated()
    image = {'reference': '%s:%s' % (gen['lab_generated_standin_image'], tag), 'digest': digest}
    model = {'revision': gen['lab_generated_model_revision'], 'size_bytes': int(gen['lab_generated_model_size_bytes'])}
    names = ['sm90-patched', 'sm90-upstream', 'sm100', 'sm90-small-tp2', 'sm100-small-tp2']
    data = {'preflight_variant_overrides': dict((n, {'image': image, 'model': model}) for n in names),
            'rollout_serial': [1], 'rollout_report_dir': os.path.join(os.path.dirname(path), 'reports')}
    with open(path, 'w') as f:
        yaml.safe_dump(data, f)
    return path


def playbook(inventory, book, varsfile):
    run(['ansible-playbook', '-i', inventory, book, '-e', '@' + varsfile], env=env(),
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    ap.add_argument('--inventory', default='inventory/lab')
    ap.add_argument('--layer-mb', type=int, default=64, help='size of the new image layer to pull (MB)')
    ap.add_argument('--registry-rate', default='80mbit', help="tc rate of the registry's link, or 'off'")
    ap.add_argument('--max-s', type=float, default=1800, help='longest time a prober runs')
    args = ap.parse_args()

    hosts = fleet_hosts(args.inventory)
    gen = generated()
    old_digest = gen['lab_generated_standin_digest_lab']
    work = tempfile.mkdtemp(prefix='inkling-bench-')
    new_digest = build_and_push_next(args.layer_mb)
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
        playbook(args.inventory, deploy, old_vars)

    print('upgrade to a new image (+%d MB layer, registry link %s), %d hosts, serial 1'
          % (args.layer_mb, args.registry_rate, len(hosts)))
    print('%-16s %14s %14s' % ('host', 'rollout (s)', 'naive (s)'))
    for host in hosts:
        print('%-16s %14.1f %14.1f' % (host, results['rollout'][1][host], results['naive'][1][host]))
    print('%-16s %14.1f %14.1f' % ('fleet total', sum(results['rollout'][1].values()), sum(results['naive'][1].values())))
    print('%-16s %14.1f %14.1f' % ('wall time', results['rollout'][0], results['naive'][0]))


if __name__ == '__main__':
    main()
