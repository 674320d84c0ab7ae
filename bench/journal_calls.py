#!/usr/bin/env python3
"""Milliseconds per call of the rollout journal (inkling.fleet.rollout_journal) as the fleet grows
(issue 34: at most 5 ms per call at 1,024 hosts, the same at 64).

For each fleet size N: opens a rollout of N hosts through the action plugin's real code path
(ActionModule.run, with the task's arguments and the hosts' facts as Ansible hands them; each
host's contract carries a variant table entry of --entry-kb, as a real one does), then walks
--walk hosts through a whole restart as the rollout role calls the journal, host after host:
admit, staged, admit, draining, restarting, stopped, started, serving_new, done (9 calls per
host), and times each call. Then closes the rollout (reports written) and checks what it wrote:
every walked host done with its nine records, every other host still pending, no lost record.

Prints per N: open and close in seconds (once per run, O(N)), and the milliseconds per call of
record, step and admit (median, mean, 95th percentile), then the growth of the median from the
smallest N to the largest. The calls run in this process, one after another: what a call costs
the controller beyond the fork of Ansible's worker and the plugin's import (the same at any N).
A call that writes commits with two fsyncs (journal.db's rollback journal, then the database):
the time of one fsync on the work directory's disk is printed beside, before and after each N,
since it, not the fleet's size, sets most of a write's time on a busy disk.

--root DIR takes the collection from another checkout (DIR/collections), e.g. the code before
the store for a baseline: `bench/journal_calls.py --root /path/to/old --sizes 64,1024 --walk 4`.

Usage: .venv/bin/python bench/journal_calls.py [--sizes 64,1024] [--walk 32] [--entry-kb 8]
           [--root DIR] [--dir DIR] [--quick]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WALK = [('admit', None), ('record', 'staged'), ('admit', None), ('record', 'draining'), ('record', 'restarting'),
        ('step', 'stopped'), ('step', 'started'), ('record', 'serving_new'), ('record', 'done')]


class _Task(object):
    action = 'inkling.fleet.rollout_journal'
    async_val = 0
    diff = False

    def __init__(self, args):
        self.args = args
        self.check_mode = False


class _Shell(object):
    tmpdir = None


class _Connection(object):
    _shell = _Shell()


def entries(kb):
    """The lab's variant table entries (roles/preflight), each padded to about ``kb`` KiB as a selected
    variant with its overrides and sources is."""
    with open(os.path.join(REPO, 'data', 'variants.yml')) as f:
        table = yaml.safe_load(f)['variants']
    out = []
    for name in sorted(table)[:2]:
        entry = dict(table[name], name=name)
        size = len(json.dumps(entry))
        entry['bench_padding'] = ['x' * 100] * max(0, (kb * 1024 - size) // 104)
        out.append(entry)
    return out


def contract(host, entry):
    image = entry.get('image') or {}
    return {'host': host, 'variant': entry['name'], 'entry': entry, 'repo_id': (entry.get('model') or {}).get('repo_id'),
            'revision': (entry.get('model') or {}).get('revision'), 'image': image.get('reference'),
            'image_digest': image.get('digest'), 'served_model_name': entry.get('served_model_name'),
            'vllm_args': list(entry.get('vllm_args') or []), 'env': dict(entry.get('env') or {}),
            'tensor_parallel_size': entry.get('tensor_parallel_size'), 'hub_cache_dir': '/var/lib/inkling/huggingface/hub',
            'auth_file': '', 'staged': True}


def call(action_class, report_dir, host, args, task_vars=None):
    args = dict(args, report_dir=report_dir, host=host)
    action = action_class(_Task(args), _Connection(), None, None, None, None)
    t0 = time.perf_counter()
    result = action.run(task_vars=dict(task_vars or {}, inventory_hostname=host))
    took = time.perf_counter() - t0
    if result.get('failed'):
        raise SystemExit('journal call %s for %s failed: %s' % (args, host, result.get('msg')))
    return result, took


def one_size(action_class, n, walk, kb, work):
    report_dir = os.path.join(work, 'reports-%d' % n)
    hosts = ['gpu-%04d' % i for i in range(n)]
    table = entries(kb)
    hostvars = dict((h, {'rollout_deployment': contract(h, table[i % len(table)])}) for i, h in enumerate(hosts))
    _r, t_open = call(action_class, report_dir, hosts[0], {'action': 'open', 'hosts': hosts, 'max_failed': 1},
                      {'hostvars': hostvars})
    times = {'record': [], 'step': [], 'admit': []}
    walked = hosts[::max(1, n // walk)][:walk]
    for host in walked:
        for kind, name in WALK:
            args = {'action': kind, 'max_failed': 1}
            if kind == 'record':
                args['phase'] = name
            elif kind == 'step':
                args['step'] = name
            result, took = call(action_class, report_dir, host, args)
            if kind == 'admit' and not result.get('admitted'):
                raise SystemExit('%s was not admitted: %s' % (host, result))
            times[kind].append(took)
    closed, t_close = call(action_class, report_dir, hosts[0], {'action': 'close'})
    journal = call(action_class, report_dir, hosts[0], {'action': 'read'})[0]['journal']
    # correctness: what the calls recorded is all there
    problems = []
    for host in hosts:
        rec = journal['hosts'].get(host) or {}
        phases = [e.get('phase') for e in rec.get('events', [])]
        if host in walked and phases != ['pending', 'staged', 'draining', 'restarting', 'stopped', 'started',
                                         'serving_new', 'done']:
            problems.append('%s: %s' % (host, phases))
        elif host not in walked and rec.get('phase') != 'pending':
            problems.append('%s: %s' % (host, rec.get('phase')))
    if problems or not os.path.exists(closed['report_json']):
        raise SystemExit('the journal lost records: %s' % problems[:5])
    size = sum(os.path.getsize(os.path.join(report_dir, f)) for f in os.listdir(report_dir)
               if f.startswith('journal.'))
    return {'n': n, 'open_s': t_open, 'close_s': t_close, 'times': times, 'walked': len(walked),
            'journal_mb': size / 1e6}


def fsync_ms(directory, rounds=20):
    """The median time of one 4 KiB write and fsync in ``directory``: a write call's commit costs two."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, '.fsync-probe')
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    took = []
    try:
        for _i in range(rounds):
            t0 = time.perf_counter()
            os.pwrite(fd, b'x' * 4096, 0)
            os.fsync(fd)
            took.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(took) * 1000


def ms(values):
    values = sorted(values)
    return (statistics.median(values) * 1000, statistics.mean(values) * 1000,
            values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))] * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    ap.add_argument('--sizes', default='64,1024', help='fleet sizes, comma-separated (default 64,1024)')
    ap.add_argument('--walk', type=int, default=32, help='hosts walked through a restart per size (9 calls each)')
    ap.add_argument('--entry-kb', type=int, default=8, help='size of each contract entry in KiB (default 8)')
    ap.add_argument('--root', default=REPO, help='the checkout whose collections/ holds the code to measure')
    ap.add_argument('--dir', help='work directory (default: a new temporary one, removed at the end)')
    ap.add_argument('--quick', action='store_true', help='64 hosts, 8 walked')
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.walk = '64', 8
    sys.path.insert(0, os.path.join(os.path.abspath(args.root), 'collections'))
    from ansible_collections.inkling.fleet.plugins.action import rollout_journal  # pylint: disable=import-outside-toplevel
    work = args.dir or tempfile.mkdtemp(prefix='journal-calls-')
    results = []
    try:
        print('rollout journal calls, code from %s, entries of %d KiB' % (os.path.dirname(rollout_journal.__file__),
                                                                          args.entry_kb))
        for n in [int(x) for x in args.sizes.split(',')]:
            before = fsync_ms(work)
            res = one_size(rollout_journal.ActionModule, n, args.walk, args.entry_kb, work)
            results.append(res)
            every = [t for ts in res['times'].values() for t in ts]
            figures = (n, res['open_s'], res['close_s'], res['journal_mb'], len(every), res['walked'], before, fsync_ms(work))
            print('%5d hosts: open %.2f s, close %.2f s, journal files %.1f MB; %d calls (%d hosts walked); one fsync '
                  'here: %.2f ms before, %.2f ms after' % figures)
            for kind in ('record', 'step', 'admit'):
                print('        %-6s ms per call: median %7.2f  mean %7.2f  p95 %7.2f' % ((kind,) + ms(res['times'][kind])))
            print('        all    ms per call: median %7.2f  mean %7.2f  p95 %7.2f' % ms(every))
        if len(results) > 1:
            first, last = results[0], results[-1]
            a = ms([t for ts in first['times'].values() for t in ts])[0]
            b = ms([t for ts in last['times'].values() for t in ts])[0]
            print('growth of the median, %d -> %d hosts: x %.2f' % (first['n'], last['n'], b / a))
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
