# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The controller's decisions of the hf_cache peer fan-out (plugins/module_utils/hf_fanout.py) and the
filters that read them from hostvars (plugins/filter/hf_fanout.py)."""

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


class HostVars(dict):
    """hostvars as the filters see it: a mapping of host name to that host's variables."""


def test_the_filters_read_the_roles_facts_from_hostvars():
    hv = HostVars({
        'h1': {'__hf_cache_peer_run': 'r1', '__hf_cache_holder': False, '__hf_cache_is_seed': True,
               '__hf_cache_local': {'revision': None}, '__hf_cache_plan': {'revision': A}},
        'h2': {'__hf_cache_peer_run': 'r2', '__hf_cache_holder': True, '__hf_cache_is_seed': False,
               '__hf_cache_local': {'revision': B}, '__hf_cache_plan': {}},
        'h3': {'__hf_cache_peer_run': 'r3', '__hf_cache_holder': False, '__hf_cache_local': {}},
        'other': {'hf_cache_source': 'hub'},           # in the play, another source: no peer facts
    })
    play = ['h1', 'h2', 'h3', 'other']
    assert filters.hf_peer_seeds(['h1', 'h2', 'h3', 'other'], hv, play, 1) == []     # h2 holds B
    plan = filters.hf_peer_plan(['h1', 'h2', 'h3', 'other'], hv, play, A)
    assert plan == {'peers': ['h1', 'h2', 'h3'], 'seeds': ['h1'], 'holders': ['h2'], 'commit': A, 'roots': ['h1'],
                    'receivers': ['h2', 'h3'], 'run': 'r1'}
    # h1's download failed and it left the play
    assert filters.hf_peer_failures(plan, hv, ['h2', 'h3', 'other']) == {
        'dead': ['h1'], 'abort': True, 'reason': 'no host holds a verified snapshot any more (h1 failed)'}
    # h1 holds now
    hv['h1']['__hf_cache_holder'] = True
    assert filters.hf_peer_failures(plan, hv, play) == {'dead': [], 'abort': False, 'reason': ''}
    assert set(filters.FilterModule().filters()) == {'hf_peer_seeds', 'hf_peer_plan', 'hf_peer_failures'}


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
