# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The failure budget as counters (plugins/module_utils/rollout.py, issue 34): built from every host
by open_run and close_run, updated by each record from the host's own record and its replica's
members, they are at every moment what a scan of every host gives, and the halt reason says where
the hosts failed exactly as the scan did (FAILED_WORDS)."""

import random

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import rollout as r

NOW = '2026-12-07T00:00:00Z'
T0 = 1796000000.0
ENTRY = {'name': 'sm90-patched', 'notes': 'x' * 2000, 'image': {'reference': 'reg.lab/vllm:2'}}
B_ENTRY = dict(ENTRY, name='sm100')


def contract(host, entry=None, replica=None):
    entry = dict(entry or ENTRY)
    if replica:
        entry['replica'] = replica
    return {'host': host, 'variant': entry['name'], 'entry': entry, 'image': 'reg.lab/vllm:2',
            'image_digest': 'sha256:' + 'b' * 64, 'revision': 'main', 'served_model_name': 'inkling',
            'vllm_args': [], 'env': {}}


def scan_failed_by_phase(journal):
    """The halt reason's breakdown as the code before the counters computed it: a scan of every host."""
    phases = [rec.get('phase') for rec in journal.get('hosts', {}).values()]
    return ', '.join('%s: %d' % (words, phases.count(p)) for p, words in r.FAILED_WORDS if p in phases)


FAILING_WALKS = [['stage_failed'], ['staged', 'unit_refused'], ['staged', 'recheck_failed'], ['staged', 'trial_failed'],
                 ['staged', 'draining', 'drain_failed'], ['staged', 'draining', 'replica_held'],
                 ['staged', 'draining', 'restarting', 'serving_new', 'undrain_failed'],
                 ['staged', 'draining', 'restarting', 'rolling_back', 'rolled_back'],
                 ['staged', 'draining', 'restarting', 'rolling_back', 'rollback_undrain_failed'],
                 ['staged', 'draining', 'restarting', 'rolling_back', 'rollback_failed'],
                 ['staged', 'draining', 'restarting', 'rolling_back', 'removed']]
PASSING_WALKS = [['staged', 'unchanged'], ['staged', 'draining', 'restarting', 'serving_new', 'done'], ['not_reached'],
                 ['staged', 'stage_only']]


def fleet(rng, size):
    """Outcomes of a fleet of ``size`` hosts: some in two-member replicas, some set aside by preflight."""
    outcomes = {}
    hosts = ['h%03d' % i for i in range(size)]
    i = 0
    while i < len(hosts):
        if rng.random() < 0.3 and i + 1 < len(hosts):
            pair = hosts[i:i + 2]
            info = {'name': 'r%d' % i, 'members': pair, 'head': pair[0]}
            for h in pair:
                outcomes[h] = {'contract': contract(h, B_ENTRY, info)}
            i += 2
        else:
            outcomes[hosts[i]] = {'contract': contract(hosts[i], ENTRY if i % 3 else B_ENTRY)}
            i += 1
    for h in rng.sample(hosts, max(1, size // 10)):
        outcomes[h] = {'failed': '%s: GPU 7 missing' % h}
    return outcomes


def plan(rng, outcomes):
    """A random interleaving of every host's walk, with an admit before each."""
    steps = []
    for host in sorted(outcomes):
        walk = rng.choice(FAILING_WALKS if rng.random() < 0.4 else PASSING_WALKS)
        steps.append([('admit', host, None)] + [('record', host, p) for p in walk])
    out = []
    while any(steps):
        walk = rng.choice([s for s in steps if s])
        out.append(walk.pop(0))
    return out


def apply_whole(journal, op, max_failed):
    kind, host, phase = op
    if kind == 'admit':
        return r.admit(journal, host, max_failed, NOW)
    rec = journal['hosts'][host]
    if rec.get('phase') in r.TERMINAL or phase not in r.TRANSITIONS.get(rec.get('phase'), ()):
        return None
    data = {'t_stop': T0} if phase == 'restarting' else {'t_ready': T0 + 9} if phase in ('serving_new', 'rolled_back') else {}
    return r.record(journal, host, phase, NOW, data)['phase']


def halt_reason_by_scan(journal, max_failed):
    failed = r.failed_units(journal)
    return '%d %s failed (%s), over the fleet-wide budget of %d (%s)' % (
        len(failed), 'replica(s)' if journal['replicas'] else 'host(s)',
        ', '.join(r.unit_label(journal, u) for u in failed), max_failed, scan_failed_by_phase(journal))


@pytest.mark.parametrize('seed', range(12))
def test_the_counters_are_a_scan_of_every_host_after_every_call(seed):
    rng = random.Random(seed)
    outcomes = fleet(rng, rng.choice([6, 12, 30]))
    max_failed = rng.choice([0, 1, 2, 5, 100])
    journal, _a, _n = r.open_run(None, outcomes, '20261207T000000Z', NOW, max_failed=max_failed)
    assert journal['counters'] == r.budget_counters(journal)
    if journal['halted'] and 'over the fleet-wide budget' in journal['halt_reason']:
        assert journal['halt_reason'] == halt_reason_by_scan(journal, max_failed)
    for op in plan(rng, outcomes):
        was_halted = journal['halted']
        apply_whole(journal, op, max_failed)
        assert journal['counters'] == r.budget_counters(journal), op
        if journal['halted'] and not was_halted:     # the halt reason, when it is given, as the scan said it
            assert journal['halt_reason'] == halt_reason_by_scan(journal, max_failed)
    r.close_run(journal, NOW)
    assert journal['counters'] == r.budget_counters(journal)


def test_the_halt_reason_says_where_they_failed_as_the_scan_did():
    outcomes = dict((h, {'contract': contract(h)}) for h in 'abcdefg')
    outcomes['x'] = {'failed': 'GPU 7 missing'}
    journal, _a, _n = r.open_run(None, outcomes, '20261207T000000Z', NOW, max_failed=4)
    for host, walk in zip('abcd', FAILING_WALKS[::3]):
        for phase in walk:
            r.record(journal, host, phase, NOW, {'t_stop': T0} if phase == 'restarting' else {})
    assert r.admit(journal, 'e', 4, NOW) == (False, True)
    assert journal['halt_reason'] == ('5 host(s) failed (a, b, c, d, x), over the fleet-wide budget of 4 (%s)'
                                      % scan_failed_by_phase(journal))
    assert scan_failed_by_phase(journal) == ('set aside by preflight: 1, failed staging: 1, failed the image trial: 1, '
                                             'not undrained: 1, failed the rollback: 1')


def test_a_replica_counts_once_when_its_members_fail_one_after_the_other():
    info = {'name': 'r1', 'members': ['m1', 'm2'], 'head': 'm1'}
    outcomes = {'m1': {'contract': contract('m1', B_ENTRY, info)}, 'm2': {'contract': contract('m2', B_ENTRY, info)},
                's1': {'contract': contract('s1')}}
    journal, _a, _n = r.open_run(None, outcomes, '20261207T000000Z', NOW, max_failed=1)
    for op in [('record', 'm1', 'staged'), ('record', 'm2', 'staged'), ('record', 'm1', 'draining'),
               ('record', 'm2', 'draining'), ('record', 'm1', 'drain_failed'), ('record', 'm2', 'replica_held'),
               ('admit', 's1', None)]:
        apply_whole(journal, op, 1)
    assert journal['counters'] == {'failed_hosts': 2, 'failed_units': 1, 'replicas': 1,
                                   'failed_by_phase': {'drain_failed': 1, 'replica_held': 1}}
    assert not journal['halted']              # one replica failed: within the budget of 1
