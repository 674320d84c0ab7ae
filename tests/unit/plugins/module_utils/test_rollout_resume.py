# -*- coding: utf-8 -*-
"""Resume that knows what happened (issue 37): each step of a restart has its own journal record,
and a run resumed after a SIGKILL continues from them, never restarting a host twice without need
nor onto a deployment it failed, and counting each outage from its stop to its ready across runs."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import signal

import pytest

from ansible_collections.inkling.fleet.plugins.action import rollout_journal as rj
from ansible_collections.inkling.fleet.plugins.module_utils import rollout as r
from test_rollout import act, live, stored

NOW = '2026-12-07T00:00:00Z'
T0 = 1796000000.0
TARGET = {'variant': 'sm90-patched', 'image': 'reg.lab/vllm:2', 'image_digest': 'sha256:' + 'b' * 64,
          'revision': 'main', 'served_model_name': 'inkling', 'vllm_args': [], 'env': {}}


def outcomes(hosts):
    return dict((h, {'contract': dict(TARGET)}) for h in hosts)


def killed_at(point, hosts=('a', 'b'), max_failed=0):
    """Run 1 over ``hosts``: 'a' finished, 'b' killed at ``point`` (a phase or a step of its restart)."""
    journal, _ab, _n = r.open_run(None, outcomes(hosts), '20261207T000000Z', NOW, max_failed=max_failed)
    for phase, data in (('staged', {}), ('draining', {}), ('restarting', {'t_stop': T0}),
                        ('serving_new', {'t_ready': T0 + 30}), ('done', {})):
        r.record(journal, 'a', phase, NOW, data)
    path = [('phase', 'staged'), ('phase', 'draining'), ('phase', 'restarting'), ('step', 'stopped'),
            ('step', 'started'), ('phase', 'rolling_back'), ('step', 'rollback_restored'),
            ('step', 'rollback_started')]
    for kind, name in path:
        if kind == 'phase':
            r.record(journal, 'b', name, NOW, {'t_stop': T0 + 100} if name == 'restarting' else {})
        else:
            r.record_step(journal, 'b', name, NOW, T0 + 110)
        if name == point:
            return journal
    raise AssertionError(point)


def resumed(journal, hosts=('a', 'b'), max_failed=0):
    journal, abandoned, _n = r.open_run(journal, outcomes(hosts), '20261207T010000Z', NOW, max_failed=max_failed)
    assert abandoned is None and len(journal['runs']) == 2
    return journal


@pytest.mark.parametrize('point,plan', [
    ('draining', ''),               # killed during the drain: nothing was stopped, the path starts afresh
    ('restarting', 'stop'),         # the stop was about to begin or under way
    ('stopped', 'start'),           # between the stop and the start
    ('started', 'gate'),            # during the gate: the host runs the new unit
    ('rolling_back', 'rollback'),   # during the rollback, before the previous unit was back
    ('rollback_restored', 'rollback'),
    ('rollback_started', 'rollback_gate'),  # the previous unit runs: gate it, do not restart it again
])
def test_the_resume_plan_follows_the_last_durable_record(point, plan):
    journal = resumed(killed_at(point))
    assert journal['hosts']['b'].get('resume', '') == plan
    assert 'resume' not in journal['hosts']['a']
    assert journal['hosts']['b']['phase'] == 'pending'


@pytest.mark.parametrize('point,entry,path', [
    ('restarting', 'restarting', ['serving_new', 'done']),
    ('stopped', 'restarting', ['serving_new', 'done']),
    ('started', 'restarting', ['serving_new', 'done']),
    ('rolling_back', 'rolling_back', ['rolled_back']),
    ('rollback_started', 'rolling_back', ['rolled_back']),
])
def test_a_resumed_restart_is_one_restart_and_one_outage_from_the_first_stop(point, entry, path):
    journal = resumed(killed_at(point))
    r.record(journal, 'b', 'staged', NOW)
    r.admit(journal, 'b', 0, NOW)
    r.record(journal, 'b', entry, NOW, {'t_stop': T0 + 900})   # run 2's t_stop is not a new outage
    for phase in path:
        r.record(journal, 'b', phase, NOW, {'t_ready': T0 + 1000} if phase in ('serving_new', 'rolled_back') else {})
    restarts = journal['hosts']['b']['restarts']
    assert len(restarts) == 1 and restarts[0]['run'] == 1 and restarts[0]['resumed_by'] == 2
    assert restarts[0]['unavailable_s'] == 900.0                # from the stop in run 1 to the ready in run 2
    view = r.host_view(journal['hosts']['b'])
    assert view['restarts'] == 1 and view['unavailable_s'] == 900.0
    assert view['rolled_back'] == (entry == 'rolling_back')


def test_a_host_killed_during_its_rollback_is_never_restarted_onto_the_failed_deployment():
    journal = resumed(killed_at('rolling_back'))
    r.record(journal, 'b', 'staged', NOW)
    with pytest.raises(r.TransitionError, match=r"staged -> restarting .*\(its resume plan: rollback\)"):
        r.record(journal, 'b', 'restarting', NOW)
    assert journal['hosts']['b']['resume'] == 'rollback'       # kept for the rollback that follows
    r.record(journal, 'b', 'rolling_back', NOW)
    assert 'resume' not in journal['hosts']['b']
    r.record(journal, 'a', 'staged', NOW)
    with pytest.raises(r.TransitionError, match='its resume plan: none'):
        r.record(journal, 'a', 'serving_new', NOW)


@pytest.mark.parametrize('phase', r.GATE_FAILED)
def test_a_host_that_failed_its_gate_is_kept_and_never_restarted_again_in_the_same_rollout(phase):
    journal = killed_at('rolling_back', hosts=('a', 'b', 'c'), max_failed=2)
    data = {'t_ready': T0 + 200} if phase in ('rolled_back', 'rollback_undrain_failed') else {}
    r.record(journal, 'b', phase, NOW, data)
    journal = resumed(journal, hosts=('a', 'b', 'c'), max_failed=2)
    rec = journal['hosts']['b']
    assert rec['phase'] == phase and 'resume' not in rec
    assert rec['events'][-1]['phase'] == 'kept' and 'not restarted onto it again' in rec['events'][-1]['message']
    assert r.admit(journal, 'b', 2, NOW) == (False, False)
    with pytest.raises(r.TransitionError):
        r.record(journal, 'b', 'staged', NOW)
    assert r.failed_hosts(journal) == ['b']                    # it still counts against the budget
    assert len(rec['restarts']) == 1


def test_a_restart_under_way_is_finished_even_when_the_budget_is_spent():
    journal = killed_at('stopped', hosts=('a', 'b', 'c'))
    for phase, data in (('staged', {}), ('draining', {}), ('restarting', {'t_stop': T0}), ('rolling_back', {}),
                        ('rolled_back', {'t_ready': T0 + 50})):
        r.record(journal, 'c', phase, NOW, data)
    journal = resumed(journal, hosts=('a', 'b', 'c'))
    assert journal['halted']                                   # c's failed gate spent the budget of 0
    assert r.admit(journal, 'b', 0, NOW) == (True, False)      # b is stopped: it is started and gated
    assert r.admit(journal, 'a', 0, NOW)[0] is False            # a is not touched: not reached
    assert journal['hosts']['a']['phase'] == 'not_reached'


def test_an_undrain_the_killed_run_did_not_record_is_run_by_the_resumed_one():
    journal, _ab, _n = r.open_run(None, outcomes(('b',)), '20261207T000000Z', NOW)
    for phase, data in (('staged', {}), ('draining', {}), ('restarting', {'t_stop': T0}),
                        ('serving_new', {'t_ready': T0 + 30})):
        r.record(journal, 'b', phase, NOW, data)
    journal = resumed(journal, hosts=('b',))
    assert journal['hosts']['b']['resume'] == 'undrain'
    for phase in ('staged', 'serving_new', 'done'):
        r.record(journal, 'b', phase, NOW, {'t_ready': T0 + 999} if phase == 'serving_new' else {})
    assert r.host_view(journal['hosts']['b'])['unavailable_s'] == 30.0


def test_a_step_belongs_to_an_open_restart_of_its_phase():
    journal = killed_at('draining')
    with pytest.raises(r.TransitionError, match='step stopped belongs to an open restarting'):
        r.record_step(journal, 'b', 'stopped', NOW)
    with pytest.raises(r.TransitionError, match='not a step'):
        r.record_step(journal, 'b', 'rebooted', NOW)
    r.record(journal, 'b', 'restarting', NOW, {'t_stop': T0})
    with pytest.raises(r.TransitionError, match='rollback_started belongs to an open rolling_back'):
        r.record_step(journal, 'b', 'rollback_started', NOW)
    r.record_step(journal, 'b', 'stopped', NOW, T0 + 5)
    assert journal['hosts']['b']['restarts'][-1]['steps'] == [{'step': 'stopped', 't': T0 + 5, 'run': 1}]
    assert journal['hosts']['b']['events'][-1]['phase'] == 'stopped'


def test_the_journal_action_records_steps_and_admit_says_what_to_resume(tmp_path):
    stored(resumed(killed_at('started')), tmp_path)
    action = rj.ActionModule.__new__(rj.ActionModule)
    act(action, tmp_path, 'record', 'b', {'phase': 'staged', 'data': {}})
    out = act(action, tmp_path, 'admit', 'b', {'max_failed': 0})
    assert out['admitted'] and out['resume'] == 'gate' and out['canary'] is False
    act(action, tmp_path, 'record', 'b', {'phase': 'restarting', 'data': {}})
    assert act(action, tmp_path, 'step', 'b', {'step': 'started'})['step'] == 'started'
    written = live(tmp_path)
    steps = [s['step'] for s in written['hosts']['b']['restarts'][0]['steps']]
    assert steps == ['stopped', 'started', 'started'] and 'resume' not in written['hosts']['b']


def test_the_test_kill_hook_fires_only_at_its_point(monkeypatch):
    killed = []
    monkeypatch.setattr(rj.os, 'kill', lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.delenv('INKLING_FLEET_TEST_KILL_AFTER', raising=False)
    rj._test_kill_point('b', 'stopped')
    monkeypatch.setenv('INKLING_FLEET_TEST_KILL_AFTER', 'b:stopped')
    rj._test_kill_point('a', 'stopped')
    rj._test_kill_point('b', 'started')
    assert killed == []
    rj._test_kill_point('b', 'stopped')
    assert killed == [(rj.os.getppid(), signal.SIGKILL), (rj.os.getpid(), signal.SIGKILL)]
