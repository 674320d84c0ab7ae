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


def test_plan_with_a_seed_copies_the_commit_the_seed_resolved():
    states = {'h1': st(is_seed=True, planned=A, run='r-h1'), 'h2': st(run='r-h2'), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3', 'gone'], states)
    assert plan == {'peers': ['h1', 'h2', 'h3'], 'seeds': ['h1'], 'holders': [], 'commit': A, 'roots': ['h1'],
                    'receivers': ['h2', 'h3'], 'run': 'r-h1'}


def test_plan_with_holders_roots_only_the_holders_of_the_commit():
    # h1 holds A, h2 holds B (an older commit), h3 nothing: h2 copies A like h3
    states = {'h1': st(holder=True, held=A), 'h2': st(holder=True, held=B), 'h3': st()}
    plan = hf_fanout.plan(['h1', 'h2', 'h3'], states)
    assert plan['commit'] == A and plan['roots'] == ['h1'] and plan['receivers'] == ['h2', 'h3']
    assert plan['holders'] == ['h1', 'h2'] and plan['seeds'] == []


def test_plan_without_any_commit_has_no_roots():
    states = {'h1': st(is_seed=True), 'h2': st()}          # the seed's plan did not resolve (it failed)
    plan = hf_fanout.plan(['h1', 'h2'], states)
    assert plan['commit'] == '' and plan['roots'] == ['h1']
    assert hf_fanout.plan([], {}) == {'peers': [], 'seeds': [], 'holders': [], 'commit': '', 'roots': [],
                                      'receivers': [], 'run': ''}


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
    plan = filters.hf_peer_plan(['h1', 'h2', 'h3', 'other'], hv, play)
    assert plan == {'peers': ['h1', 'h2', 'h3'], 'seeds': ['h1'], 'holders': ['h2'], 'commit': A, 'roots': ['h1'],
                    'receivers': ['h2', 'h3'], 'run': 'r1'}
    # h1's download failed and it left the play
    assert filters.hf_peer_failures(plan, hv, ['h2', 'h3', 'other']) == {
        'dead': ['h1'], 'abort': True, 'reason': 'no host holds a verified snapshot any more (h1 failed)'}
    # h1 holds now
    hv['h1']['__hf_cache_holder'] = True
    assert filters.hf_peer_failures(plan, hv, play) == {'dead': [], 'abort': False, 'reason': ''}
    assert set(filters.FilterModule().filters()) == {'hf_peer_seeds', 'hf_peer_plan', 'hf_peer_failures'}
