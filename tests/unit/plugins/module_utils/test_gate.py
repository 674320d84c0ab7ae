# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Replay of the readiness sequences from field failure F16 (and F15's journal)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils.gate import (
    CONTINUE, FAILED, READY, GateObserver, Observation, classify_journal)

MODEL = 'big-moe-975b'


def _models(*ids):
    return {'object': 'list', 'data': [{'id': i} for i in ids]}


def _run(gate, observations):
    decisions = []
    for obs in observations:
        decisions.append(gate.observe(obs))
        if decisions[-1] != CONTINUE:
            break
    return decisions


def test_f16_refused_for_30_minutes_then_wrong_model_then_ready():
    """No failure before t=1810; not ready at 1810 (wrong id); ready at 1830."""
    gate = GateObserver(MODEL, timeout_s=5400, completion=False)
    seq = [Observation(t, active_state='active', n_restarts=0, health_status=None) for t in range(0, 1801, 60)]
    decisions = _run(gate, seq)
    assert set(decisions) == {CONTINUE}
    assert gate.wants() == {'health': True, 'models': False, 'completion': False}

    at_1810 = gate.observe(Observation(1810, active_state='active', n_restarts=0, health_status=200,
                                       models_status=200, models_body=_models('other-model')))
    assert at_1810 == CONTINUE
    assert gate.phase == 'health_ok'
    assert 'other-model' in gate.message

    at_1830 = gate.observe(Observation(1830, active_state='active', n_restarts=0, health_status=200,
                                       models_status=200, models_body=_models(MODEL)))
    assert at_1830 == READY
    assert gate.timings == {'health_ok_s': 1810, 'models_ok_s': 1830}


def test_f16_restart_during_startup_fails_at_once():
    gate = GateObserver(MODEL, timeout_s=5400)
    assert gate.observe(Observation(0, active_state='active', n_restarts=0)) == CONTINUE
    assert gate.observe(Observation(600, active_state='activating', n_restarts=0)) == CONTINUE
    assert gate.observe(Observation(900, active_state='active', n_restarts=1)) == FAILED
    assert 'NRestarts=1' in gate.message
    # Once failed, it stays failed.
    assert gate.observe(Observation(910, active_state='active', n_restarts=1, health_status=200)) == FAILED


def test_baseline_restarts_given_by_caller():
    gate = GateObserver(MODEL, timeout_s=100, baseline_restarts=2)
    assert gate.observe(Observation(0, active_state='active', n_restarts=3)) == FAILED


def test_503_while_starting_is_not_a_failure_but_503_after_200_is():
    gate = GateObserver(MODEL, timeout_s=600)
    assert gate.observe(Observation(1, active_state='active', n_restarts=0, health_status=503)) == CONTINUE
    assert gate.observe(Observation(2, active_state='active', n_restarts=0, health_status=200,
                                    models_status=503)) == CONTINUE
    assert gate.observe(Observation(3, active_state='active', n_restarts=0, health_status=503)) == FAILED
    assert 'engine died' in gate.message


def test_completion_required_and_latency_budget():
    gate = GateObserver(MODEL, timeout_s=600, completion=True, latency_budget_s=5)
    assert gate.observe(Observation(1, health_status=200, models_status=200,
                                    models_body=_models(MODEL))) == CONTINUE
    assert gate.wants()['completion'] is True
    assert gate.observe(Observation(2, health_status=200, completion_status=200,
                                    completion_latency=0.4)) == READY
    assert gate.timings['completion_latency_s'] == 0.4

    slow = GateObserver(MODEL, timeout_s=600, completion=True, latency_budget_s=5)
    slow.observe(Observation(1, health_status=200, models_status=200, models_body=_models(MODEL)))
    assert slow.observe(Observation(2, health_status=200, completion_status=200,
                                    completion_latency=9.5)) == FAILED
    assert 'latency budget' in slow.message


def _health_ok(gate, completion_models=True):
    """Bring a gate to the phase where /v1/models is probed (and, with completion_models, passed)."""
    assert gate.observe(Observation(1, active_state='active', n_restarts=0, health_status=200)) == CONTINUE
    assert gate.phase == 'health_ok'
    if completion_models:
        assert gate.observe(Observation(2, active_state='active', n_restarts=0, health_status=200,
                                        models_status=200, models_body=_models(MODEL))) == CONTINUE
        assert gate.phase == 'models_ok'


def test_models_error_fails_at_once_not_at_the_deadline():
    """A 500 (or a 401 for a wrong API key, a 404) from /v1/models fails at once; 502/503/504 wait."""
    for status in (500, 501, 401, 404):
        gate = GateObserver(MODEL, timeout_s=3600, completion=False)
        _health_ok(gate, completion_models=False)
        assert gate.observe(Observation(3, active_state='active', n_restarts=0, health_status=200,
                                        models_status=status)) == FAILED, status
        assert gate.phase == 'failed'
        assert gate.message == '/v1/models answered HTTP %d (expected 200 listing big-moe-975b)' % status
    for status in (None, 502, 503, 504):
        gate = GateObserver(MODEL, timeout_s=3600, completion=False)
        _health_ok(gate, completion_models=False)
        assert gate.observe(Observation(3, active_state='active', n_restarts=0, health_status=200,
                                        models_status=status)) == CONTINUE, status
        assert gate.observe(Observation(4, active_state='active', n_restarts=0, health_status=200,
                                        models_status=200, models_body=_models(MODEL))) == READY


def test_completion_error_fails_at_once_not_at_the_deadline():
    for status in (500, 400, 404):
        gate = GateObserver(MODEL, timeout_s=3600, completion=True, latency_budget_s=30)
        _health_ok(gate)
        assert gate.wants() == {'health': True, 'models': True, 'completion': True}
        assert gate.observe(Observation(3, active_state='active', n_restarts=0, health_status=200,
                                        completion_status=status, completion_latency=0.1)) == FAILED, status
        assert gate.message == 'completion answered HTTP %d' % status
    # No answer within the budget (the request timed out after budget + 1 s): over the budget.
    gate = GateObserver(MODEL, timeout_s=3600, completion=True, latency_budget_s=30)
    _health_ok(gate)
    assert gate.observe(Observation(35, active_state='active', n_restarts=0, health_status=200,
                                    completion_status=None, completion_latency=31.0)) == FAILED
    assert gate.message == 'no completion answer within 31.0 s, over the latency budget of 30.0 s'
    # Refused at once or 503 while the engine warms up: keep polling, then ready.
    gate = GateObserver(MODEL, timeout_s=3600, completion=True, latency_budget_s=30)
    _health_ok(gate)
    assert gate.observe(Observation(3, active_state='active', n_restarts=0, health_status=200,
                                    completion_status=None, completion_latency=0.01)) == CONTINUE
    assert gate.observe(Observation(4, active_state='active', n_restarts=0, health_status=200,
                                    completion_status=503, completion_latency=0.01)) == CONTINUE
    assert gate.observe(Observation(5, active_state='active', n_restarts=0, health_status=200,
                                    completion_status=200, completion_latency=0.5)) == READY


def test_deadline_names_the_phase_reached():
    gate = GateObserver(MODEL, timeout_s=60, completion=False)
    assert gate.observe(Observation(30, active_state='active', health_status=None)) == CONTINUE
    assert gate.observe(Observation(61, active_state='active', health_status=None)) == FAILED
    assert 'never answered /health' in gate.message

    gate = GateObserver(MODEL, timeout_s=60, completion=False)
    gate.observe(Observation(10, health_status=200, models_status=200, models_body=_models('x')))
    assert gate.observe(Observation(61, health_status=200, models_status=200,
                                    models_body=_models('x'))) == FAILED
    assert 'never listed big-moe-975b' in gate.message


def test_unit_failed_or_exited():
    gate = GateObserver(MODEL, timeout_s=600)
    assert gate.observe(Observation(5, active_state='failed', sub_state='failed')) == FAILED
    gate = GateObserver(MODEL, timeout_s=600)
    assert gate.observe(Observation(5, active_state='inactive', sub_state='dead')) == FAILED


def test_unexpected_http_status_fails():
    gate = GateObserver(MODEL, timeout_s=600)
    assert gate.observe(Observation(5, health_status=404)) == FAILED
    assert 'HTTP 404' in gate.message


def test_f15_journal_classified_as_engine_ready_timeout():
    journal = ('INFO loading weights\n'
               'TimeoutError: Timed out waiting for engines to send initial message on input socket.\n')
    cause, explanation = classify_journal(journal)
    assert cause == 'engine-ready timeout'
    assert 'VLLM_ENGINE_READY_TIMEOUT_S' in explanation


def test_journal_classification_other_causes():
    assert classify_journal('Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all')[0] \
        == 'CDI device not resolvable'
    assert classify_journal('cudaGetDeviceCount returned 802 -> system not yet initialized')[0] \
        == 'fabric not initialised (CUDA 802)'
    assert classify_journal("OSError: [Errno 30] Read-only file system: '/hub/models--a--b'")[0] \
        == 'read-only hub cache written to'
    assert classify_journal('all good') == (None, None)
    assert classify_journal('') == (None, None)
