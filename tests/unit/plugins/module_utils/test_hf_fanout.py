# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The controller's decisions of the hf_cache peer fan-out (plugins/module_utils/hf_fanout.py) and the
filters that read them from each host's published hf_cache_peer_state (plugins/filter/hf_fanout.py): the same
decisions as every host took before from every other host's private facts, now taken once for the play, reading
each host's variables at most once per decision."""

import random
from collections import Counter
from collections.abc import Mapping

import pytest

from ansible_collections.inkling.fleet.plugins.filter import hf_fanout as filters
from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout

A, B = 'a' * 40, 'b' * 40


def st(holder=False, is_seed=False, held='', planned='', run='r1'):
    return {'holder': holder, 'is_seed': is_seed, 'held_revision': held, 'planned_revision': planned, 'run': run}


def test_seeds_are_the_first_hosts_when_none_holds_the_snapshot():
    states = {h: st() for h in ['h1', 'h2', 'h3', 'h4']}
    assert hf_fanout.pick_seeds(['h1', 'h2', 'h3', 'h4'], states, 2) == ['h1', 'h2']
    # a host that does not take part (another source, or gone from the play) is not a seed
    del states['h1']
    assert hf_fanout.pick_seeds(['h1', 'h2', 'h3', 'h4'], states, 2) == ['h2', 'h3']


def test_no_seed_when_a_host_holds_the_snapshot():
    states = {'h1': st(), 'h2': st(), 'h3': st(holder=True, held=A)}
    assert hf_fanout.pick_seeds(['h1', 'h2', 'h3'], states, 1) == []


def test_plan_with_a_seed_copies_the_controllers_commit_the_seed_resolved():
    states = {'h1': st(is_seed=True, planned=A, run='r-h1'), 'h2': st(run='r-h2'), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3', 'gone'], states, A)
    assert plan == {'peers': ['h1', 'h2', 'h3'], 'seeds': ['h1'], 'holders': [], 'commit': A, 'roots': ['h1'],
                    'receivers': ['h2', 'h3'], 'run': 'r-h1'}


def test_plan_with_holders_roots_only_the_holders_of_the_commit():
    # h1 holds A, h2 holds B (an older commit), h3 nothing: h2 copies A like h3
    states = {'h1': st(holder=True, held=A), 'h2': st(holder=True, held=B), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3'], states, A)
    assert plan['commit'] == A and plan['roots'] == ['h1'] and plan['receivers'] == ['h2', 'h3']
    assert plan['holders'] == ['h1', 'h2'] and plan['seeds'] == []


def test_plan_without_the_controllers_commit_has_no_roots():
    # the controller did not ask the hub (check mode): nothing is copied, whatever the peers report
    states = {'h1': st(is_seed=True, planned=A), 'h2': st(holder=True, held=A), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3'], states)
    assert plan['commit'] == '' and plan['roots'] == []
    # the seed's plan did not resolve (it failed): it is no root
    plan = hf_fanout.plan(['h1', 'h2'], {'h1': st(is_seed=True), 'h2': st()}, A)
    assert plan['commit'] == A and plan['roots'] == []
    assert hf_fanout.plan([], {}) == {'peers': [], 'seeds': [], 'holders': [], 'commit': '', 'roots': [],
                                      'receivers': [], 'run': ''}


def test_a_peers_claimed_commit_is_never_the_commit_copied():
    """Finding 6 of issue 36: a holder that reports another commit (a planted ref, or main moved on) is
    neither the source of the commit nor a root; it copies the controller's commit like any receiver."""
    states = {'h1': st(holder=True, held=B), 'h2': st(holder=True, held=A), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3'], states, A)
    assert plan['commit'] == A and plan['roots'] == ['h2'] and plan['receivers'] == ['h1', 'h3']
    # no host holds the controller's commit: no root at all, not the first holder's
    plan = hf_fanout.plan(['h1', 'h3'], {'h1': st(holder=True, held=B), 'h3': st()}, A)
    assert plan['commit'] == A and plan['roots'] == [] and plan['receivers'] == ['h1', 'h3']


def test_a_seed_whose_plan_resolved_another_commit_is_no_root():
    # the branch moved between the controller's answer and the seed's plan
    states = {'h1': st(is_seed=True, planned=B), 'h2': st(is_seed=True, planned=A), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3'], states, A)
    assert plan['seeds'] == ['h1', 'h2'] and plan['roots'] == ['h2'] and plan['receivers'] == ['h1', 'h3']


def test_hub_commit_of_a_branch_a_commit_and_bad_answers():
    assert hf_fanout.hub_commit({'sha': A}, 'main') == (A, None)
    assert hf_fanout.hub_commit({'sha': A}, A) == (A, None)
    commit, error = hf_fanout.hub_commit({'sha': B}, A)
    assert commit is None and 'not ' + A in error
    for info in ({}, {'sha': None}, {'sha': 'abc'}, {'sha': A.upper()}):
        commit, error = hf_fanout.hub_commit(info, 'main')
        assert commit is None and 'names no commit' in error, info
    commit, error = hf_fanout.hub_commit(['x'], 'main')
    assert commit is None and 'list' in error


def test_failures_none_when_the_seed_holds():
    plan = {'peers': ['h1', 'h2', 'h3'], 'roots': ['h1']}
    states = {'h1': st(is_seed=True, holder=True), 'h2': st(), 'h3': st()}
    assert hf_fanout.failures(plan, ['h1', 'h2', 'h3'], states) == {'dead': [], 'abort': False, 'reason': ''}


def test_a_failed_seed_still_in_the_play_is_dead_and_the_copies_give_up():
    """A block around the role rescued the seed: it is in the play but holds nothing."""
    plan = {'peers': ['h1', 'h2', 'h3'], 'roots': ['h1']}
    states = {'h1': st(is_seed=True), 'h2': st(), 'h3': st()}
    out = hf_fanout.failures(plan, ['h1', 'h2', 'h3'], states)
    assert out == {'dead': ['h1'], 'abort': True,
                   'reason': 'no host holds a verified snapshot any more (h1 failed)'}


def test_a_host_gone_from_the_play_is_dead_and_another_root_keeps_serving():
    plan = {'peers': ['h1', 'h2', 'h3', 'h4'], 'roots': ['h1', 'h2']}
    states = {'h2': st(holder=True), 'h3': st(), 'h4': st()}
    out = hf_fanout.failures(plan, ['h2', 'h3', 'h4'], states)
    assert out == {'dead': ['h1'], 'abort': False, 'reason': 'h1 failed'}


class CountingHostvars(Mapping):
    """hostvars as the filters see it: host name to that host's variables. Like Ansible's, each
    ``hostvars[name]`` is a full evaluation of that host's variables (0.55 to 0.8 ms on a real fleet): it is
    counted; ``name in hostvars`` asks the inventory only, and is not."""

    def __init__(self, data):
        self.data = data
        self.reads = Counter()

    def __getitem__(self, name):
        self.reads[name] += 1
        return self.data[name]

    def __contains__(self, name):
        return name in self.data

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def pub(run='r1', holder=False, held='', address=''):
    """What the role publishes on a host taking part (hf_cache_peer_state)."""
    return {'hf_cache_peer_state': {'run': run, 'holder': holder, 'held_revision': held, 'address': address}}


def test_the_filters_read_the_published_state_and_the_seeds_they_are_given():
    hv = CountingHostvars({
        'h1': pub('r1', address='10.0.0.1'),
        'h2': pub('r2', holder=True, held=B, address='10.0.0.2'),
        'h3': pub('r3'),                                 # no address: copies, is not allowed in
        'other': {'hf_cache_source': 'hub', '__hf_cache_holder': False},   # another source: not in the fan-out
    })
    play = ['h1', 'h2', 'h3', 'other']
    assert filters.hf_peer_seeds(['h1', 'h2', 'h3', 'other'], hv, play, 1) == []     # h2 holds B
    plan = filters.hf_peer_plan(['h1', 'h2', 'h3', 'other'], hv, play, A, {'h1': A})
    assert plan == {'peers': ['h1', 'h2', 'h3'], 'seeds': ['h1'], 'holders': ['h2'], 'commit': A, 'roots': ['h1'],
                    'receivers': ['h2', 'h3'], 'run': 'r1',
                    'addresses': {'h1': '10.0.0.1', 'h2': '10.0.0.2', 'h3': ''}, 'allow': ['10.0.0.1', '10.0.0.2']}
    # h1's download failed and it left the play
    assert filters.hf_peer_failures(plan, hv, ['h2', 'h3', 'other']) == {
        'dead': ['h1'], 'abort': True, 'reason': 'no host holds a verified snapshot any more (h1 failed)'}
    # h1 is still in the play (rescued) but holds nothing: dead too
    assert filters.hf_peer_failures(plan, hv, play)['dead'] == ['h1']
    # h1 holds now
    hv.data['h1']['hf_cache_peer_state']['holder'] = True
    assert filters.hf_peer_failures(plan, hv, play) == {'dead': [], 'abort': False, 'reason': ''}
    # no private fact of the role is read: a host with only private facts does not take part
    assert filters.hf_peer_plan(['other'], hv, play, A, {})['peers'] == []
    assert set(filters.FilterModule().filters()) == {'hf_peer_seeds', 'hf_peer_plan', 'hf_peer_failures'}


# --- the same decisions as before the decisions were taken once -----------------------------------

def old_states(names, hostvars, play_hosts):
    """What the filters read before: each host's private facts, on every host (plugins/filter/hf_fanout.py
    before the decisions were taken once); the reference the new filters must agree with."""
    states = {}
    for name in names:
        facts = hostvars.get(name)
        if name not in play_hosts or facts is None or '__hf_cache_peer_run' not in facts:
            continue
        states[name] = {'holder': bool(facts.get('__hf_cache_holder')),
                        'is_seed': bool(facts.get('__hf_cache_is_seed')),
                        'held_revision': (facts.get('__hf_cache_local') or {}).get('revision') or '',
                        'planned_revision': (facts.get('__hf_cache_plan') or {}).get('revision') or '',
                        'run': facts.get('__hf_cache_peer_run') or ''}
    return states


def scenario(rnd, n):
    """A fleet of n hosts: who is in the play, who takes part, who holds which commit, the addresses."""
    names = ['gpu-%03d' % i for i in range(n)]
    hosts = {}
    for name in names:
        if rnd.random() < 0.1:
            hosts[name] = None                          # another source
            continue
        held = rnd.choice(['', '', '', A, B]) if rnd.random() < 0.3 else ''
        hosts[name] = {'run': 'r-' + name, 'holder': bool(held) and rnd.random() < 0.9, 'held': held,
                       'address': '' if rnd.random() < 0.05 else '10.0.%d.%d' % (len(hosts) // 250, len(hosts) % 250)}
    play = [h for h in names if rnd.random() < 0.95]
    peer_hosts = [h for h in names if rnd.random() < 0.97]
    return names, hosts, play, peer_hosts


def old_facts(hosts, seeds, planned):
    out = {}
    for name, h in hosts.items():
        if h is None:
            out[name] = {'hf_cache_source': 'hub'}
            continue
        out[name] = {'__hf_cache_peer_run': h['run'], '__hf_cache_holder': h['holder'],
                     '__hf_cache_is_seed': name in seeds, '__hf_cache_local': {'revision': h['held'] or None},
                     '__hf_cache_plan': {'revision': planned.get(name, '')} if name in seeds else {},
                     '__hf_cache_peer_addr': h['address']}
    return out


def new_facts(hosts):
    return dict((name, pub(h['run'], h['holder'], h['held'], h['address']) if h else {'hf_cache_source': 'hub'})
                for name, h in hosts.items())


def test_the_decisions_are_the_ones_every_host_took_before_for_the_same_inputs():
    rnd = random.Random(34)
    for dummy in range(300):
        names, hosts, play, peer_hosts = scenario(rnd, rnd.randint(1, 40))
        count = rnd.randint(0, 3)
        commit = rnd.choice([A, A, A, ''])
        hv = CountingHostvars(new_facts(hosts))
        seeds = filters.hf_peer_seeds(peer_hosts, hv, play, count)
        planned = dict((s, rnd.choice([A, A, B, ''])) for s in seeds)
        old = old_facts(hosts, seeds, planned)
        assert seeds == hf_fanout.pick_seeds(peer_hosts, old_states(peer_hosts, old, set(play)), count)
        plan = filters.hf_peer_plan(peer_hosts, hv, play, commit, planned)
        old_plan = hf_fanout.plan(peer_hosts, old_states(peer_hosts, old, set(play)), commit)
        assert dict((k, v) for k, v in plan.items() if k not in ('addresses', 'allow')) == old_plan
        # what peer_copy.yml, rsyncd.yml and rsyncd.conf.j2 computed on every host from every peer's hostvars
        assert plan['addresses'] == dict((p, old[p]['__hf_cache_peer_addr']) for p in old_plan['peers'])
        assert plan['allow'] == [old[p]['__hf_cache_peer_addr'] for p in old_plan['peers'] if old[p]['__hf_cache_peer_addr']]
        # the seeds' downloads end: each seed holds, or fails and leaves the play, or is rescued and stays
        alive = list(play)
        for s in seeds:
            fate = rnd.choice(['holds', 'holds', 'left', 'rescued'])
            if fate == 'holds':
                hv.data[s]['hf_cache_peer_state']['holder'] = old[s]['__hf_cache_holder'] = True
            elif fate == 'left':
                alive.remove(s)
        for r in plan['receivers']:
            hv.data[r]['hf_cache_peer_state']['holder'] = old[r]['__hf_cache_holder'] = False
        peers = plan['peers']
        assert filters.hf_peer_failures(plan, hv, alive) == hf_fanout.failures(plan, alive, old_states(peers, old, set(peers)))


# --- each decision once for the play: O(N) host variables in all, not O(N) per host ------------------

def stage(n, hv=None):
    """The peer staging of stage_peer.yml on n hosts, as the controller runs it: each decision once
    (run_once), then every host's inputs looked up in the one result. Returns the hostvars it read."""
    names = ['gpu-%04d' % i for i in range(n)]
    hv = hv or CountingHostvars(dict((h, pub('r-' + h, address='10.1.%d.%d' % (i // 250, i % 250)))
                                     for i, h in enumerate(names)))
    seeds = filters.hf_peer_seeds(names, hv, names, 2)                        # run_once
    plan = filters.hf_peer_plan(names, hv, names, A, dict((s, A) for s in seeds))  # run_once
    for host in names:                                # every host: its part of the plan, no host variables
        assert (host in seeds) == (host in plan['seeds'])
        if host in plan['receivers']:
            assert plan['addresses'][plan['roots'][0]].startswith('10.1.') and len(plan['allow']) == n
    for s in seeds:
        hv.data[s]['hf_cache_peer_state']['holder'] = True
    failed = filters.hf_peer_failures(plan, hv, names)                      # run_once
    assert failed == {'dead': [], 'abort': False, 'reason': ''}
    return hv.reads


@pytest.mark.parametrize('n', [8, 64, 1024])
def test_the_whole_plays_decisions_read_o_n_host_variables_not_o_n_per_host(n):
    reads = stage(n)
    # seeds and plan read each host once; failures only the seeds and the roots
    assert max(reads.values()) <= 3 and sum(reads.values()) <= 2 * n + 4, reads.most_common(3)
    assert sum(stage(2 * n).values()) <= 2 * sum(reads.values()) + 4      # linear in the fleet


def test_a_host_listed_twice_is_read_once():
    hv = CountingHostvars({'h1': pub(), 'h2': pub()})
    assert filters.hf_peer_seeds(['h1', 'h2', 'h1', 'h2'], hv, ['h1', 'h2'], 1) == ['h1']
    assert hv.reads == Counter({'h1': 1, 'h2': 1})


# --- the relay and its schedule model -------------------------------------------------------------

def test_a_chain_relays_each_file_to_exactly_one_host():
    peers = ['h1', 'h2', 'h3', 'h4', 'h5']
    assert hf_fanout.relay_parents(peers, ['h1']) == {'h2': 'h1', 'h3': 'h2', 'h4': 'h3', 'h5': 'h4'}
    assert hf_fanout.relay_parents(peers, ['h1'], degree=2) == {'h2': 'h1', 'h3': 'h1', 'h4': 'h2', 'h5': 'h2'}
    # one relay per root, receivers dealt round-robin; roots anywhere in the order
    assert hf_fanout.relay_parents(peers, ['h3', 'h1']) == {'h2': 'h1', 'h4': 'h3', 'h5': 'h2'}
    assert hf_fanout.relay_parents(peers, []) == {}


def test_sources_are_the_ancestors_then_the_roots_then_the_others():
    peers = ['h1', 'h2', 'h3', 'h4', 'h5']
    assert hf_fanout.relay_sources('h4', peers, ['h1']) == ['h3', 'h2', 'h1', 'h5']
    assert hf_fanout.relay_sources('h2', peers, ['h1']) == ['h1', 'h3', 'h4', 'h5']
    assert hf_fanout.relay_sources('h5', peers, ['h1'], degree=2) == ['h2', 'h1', 'h3', 'h4']
    assert hf_fanout.relay_sources('h5', peers, ['h1', 'h3']) == ['h2', 'h1', 'h3', 'h4']


def test_the_model_of_a_chain_is_t1_times_one_plus_n_minus_1_over_f():
    # 8 hosts, 32 equal files of 1 MB, 8 Mbit/s: T1 = 32 s; a chain: 32 x (1 + 7/32) = 39 s
    pred = hf_fanout.schedule(8, [10 ** 6] * 32, 8e6)
    assert abs(pred['t1_s'] - 32.0) < 1e-9
    assert abs(pred['makespan_s'] - 39.0) < 1e-9 and abs(pred['ratio'] - 39.0 / 32) < 1e-9
    assert pred['host_s'] == sorted(pred['host_s'])          # down the chain, each one file later
    # one host: T1; fixed costs add per file and per hop
    assert hf_fanout.schedule(1, [10 ** 6] * 4, 8e6)['makespan_s'] == 4.0
    slow = hf_fanout.schedule(8, [10 ** 6] * 32, 8e6, per_file_s=0.1, per_hop_s=0.5)
    assert abs(slow['makespan_s'] - (32 * 1.1 + 7 * (1.1 + 0.5))) < 1e-9


def test_the_model_pays_a_connection_per_batch_not_per_file():
    # the root gets all 10 files at once (a fast hub): the receiver takes the first one as soon as it sees it,
    # then the nine others in one connection (two connections, not ten)
    full = hf_fanout.schedule(2, [10 ** 6] * 10, 8e6, hub_rate_bps=8e15, per_connection_s=0.5, per_hop_s=0.1)
    assert abs(full['host_s'][1] - (0.1 + 2 * 0.5 + 10 * 1.0)) < 1e-6
    # a receiver that keeps up (the root gets a file every 2 s from a slower hub, the receiver relays it in
    # 0.5 + 1 s) pays a connection per file: the last one 1.5 s after the root's
    step = hf_fanout.schedule(2, [10 ** 6] * 10, 8e6, hub_rate_bps=4e6, per_connection_s=0.5)
    assert abs(step['host_s'][1] - (20.0 + 1.5)) < 1e-9
    # a receiver slower than its root (1 s a file) falls behind and catches up in batches: 12 connections for
    # 40 files, 47 s (a connection per file would take 1 + 40 x 1.5 = 61 s)
    assert abs(hf_fanout.schedule(2, [10 ** 6] * 40, 8e6, per_connection_s=0.5)['host_s'][1] - 47.0) < 1e-9
    # without a connection cost, batching changes nothing: the closed form holds
    assert abs(hf_fanout.schedule(8, [10 ** 6] * 32, 8e6, per_connection_s=0.0)['makespan_s'] - 39.0) < 1e-9


def test_the_model_of_the_piece_relay_lags_a_piece_per_hop_not_a_file():
    # 8 hosts, 32 files of 1 MB, 8 Mbit/s, pieces of 0.1 MB: T1 = 32 s, each hop 0.1 s behind: 32.7 s
    pred = hf_fanout.schedule(8, [10 ** 6] * 32, 8e6, piece_bytes=10 ** 5)
    assert abs(pred['makespan_s'] - (32 + 7 * 0.1)) < 1e-9
    assert pred['makespan_s'] < hf_fanout.schedule(8, [10 ** 6] * 32, 8e6)['makespan_s'] - 6.2   # 39 s per file
    # one file: still a piece per hop (store and forward would take 8 file times)
    assert abs(hf_fanout.schedule(8, [10 ** 6], 8e6, piece_bytes=10 ** 5)['makespan_s'] - 1.7) < 1e-9
    # a hop's delay adds per hop; a connection per file makes a receiver slower than its parent, so it falls
    # behind by that much per file; a piece larger than a file is the file
    slow = hf_fanout.schedule(3, [10 ** 6] * 4, 8e6, piece_bytes=10 ** 5, per_hop_s=0.2)
    assert abs(slow['host_s'][1] - (4 + 0.1 + 0.2)) < 1e-9 and abs(slow['host_s'][2] - (4 + 2 * 0.3)) < 1e-9
    drift = hf_fanout.schedule(2, [10 ** 6] * 4, 8e6, piece_bytes=10 ** 5, per_connection_s=0.05)
    assert abs(drift['host_s'][1] - (1.1 + 3 * 1.05)) < 1e-9     # a piece behind on the first file, then 1.05 s a file
    assert abs(hf_fanout.schedule(2, [10 ** 5] * 2, 8e6, piece_bytes=10 ** 6)['makespan_s'] - 0.3) < 1e-9


def test_the_model_of_a_tree_shares_the_parent_link():
    # binary tree of 7 hosts, 1 file: each level halves the rate: 1 + 2 + 2 = 5 s
    pred = hf_fanout.schedule(7, [10 ** 6], 8e6, degree=2)
    assert abs(pred['makespan_s'] - 5.0) < 1e-9
    # many files, few hosts: a chain wins; one file, many hosts: a tree wins
    assert hf_fanout.best_degree(8, [10 ** 6] * 64, 8e6)[0] == 1
    assert hf_fanout.best_degree(64, [10 ** 6] * 2, 8e6)[0] > 1


def test_the_hub_list_is_the_hub_answer_for_that_commit():
    info = {'sha': A, 'siblings': [
        {'rfilename': 'model-1.safetensors', 'size': 10, 'blobId': '1' * 40, 'lfs': {'sha256': 'c' * 64, 'size': 10}},
        {'rfilename': 'config.json', 'size': 3, 'blobId': 'd' * 40}]}
    files, err = hf_fanout.hub_files(info, A)
    assert err is None and files == [
        {'path': 'config.json', 'size': 3, 'etag': 'd' * 40, 'lfs': False},
        {'path': 'model-1.safetensors', 'size': 10, 'etag': 'c' * 64, 'lfs': True}]
    assert hf_fanout.hub_files(info, A, allow_patterns=['*.json'])[0] == files[:1]
    assert hf_fanout.hub_files(info, B) == (None, "the hub describes commit %r, not %s" % (A, B))
    assert 'no usable hash' in hf_fanout.hub_files({'sha': A, 'siblings': [{'rfilename': 'x', 'size': 1, 'blobId': 'zz'}]},
                                                   A)[1]
    assert hf_fanout.hub_files({'sha': A, 'siblings': []}, A)[0] is None
