# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""docs/report-schema.json, the published schema of the journal and the JSON report, agrees with the
code: its phases are the state machine's, and journals the engine writes (a rollout with every kind of
host outcome, a resumed one, an abandoned one) validate against it."""

import json
import os

import jsonschema
import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import rollout as r

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOW = '2026-12-04T10:00:00Z'


def schema():
    with open(os.path.join(REPO, 'docs', 'report-schema.json')) as f:
        return json.load(f)


def validate(journal):
    jsonschema.validate(json.loads(json.dumps(journal)), schema())
    # what the action plugin checks before it works on a journal read from disk
    assert r.check_journal(json.loads(json.dumps(journal))) == []


def contract(host, variant='sm90-patched'):
    return {'variant': variant, 'image': 'registry.example.com/vllm@sha256:' + 'a' * 64,
            'image_digest': 'sha256:' + 'a' * 64, 'revision': 'b' * 40, 'served_model_name': 'inkling',
            'vllm_args': [], 'env': {}, 'host': host, 'entry': {}}


def opened(hosts, failed=(), previous=None, max_failed=5):
    outcomes = dict((h, {'contract': contract(h)}) for h in hosts)
    outcomes.update((h, {'failed': 'nvidia-smi not found'}) for h in failed)
    return r.open_run(previous, outcomes, '20261204T100000Z', NOW, max_failed=max_failed)


def test_the_schema_knows_every_phase_and_status():
    host = schema()['properties']['hosts']['additionalProperties']['properties']
    phases = set(r.TERMINAL) | set(p for p in r.TRANSITIONS if p) | set(x for v in r.TRANSITIONS.values() for x in v)
    assert set(host['phase']['enum']) - {None} == phases
    assert schema()['properties']['version']['const'] == r.JOURNAL_VERSION


def test_a_closed_rollout_with_every_kind_of_outcome_validates():
    journal, _a, _n = opened(['done', 'back', 'undrain', 'stage'], failed=['aside'])
    steps = {'done': ['staged', 'draining', 'restarting', 'serving_new', 'done'],
             'back': ['staged', 'draining', 'restarting', 'rolling_back', 'rolled_back'],
             'undrain': ['staged', 'draining', 'restarting', 'rolling_back', 'rollback_undrain_failed'],
             'stage': ['stage_failed']}
    for host, phases in steps.items():
        for phase in phases:
            data = {'t_stop': 100.0} if phase == 'restarting' else {}
            if phase in ('serving_new', 'rolled_back', 'rollback_undrain_failed'):
                data['t_ready'] = 130.0
            r.record(journal, host, phase, NOW, data)
    validate(journal)
    r.close_run(journal, NOW)
    validate(journal)


def test_a_resumed_and_an_abandoned_journal_validate():
    journal, _a, _n = opened(['a', 'b'])
    r.record(journal, 'a', 'staged', NOW)
    r.record(journal, 'a', 'draining', NOW)
    resumed, abandoned, _n = opened(['a', 'b'], previous=json.loads(json.dumps(journal)))
    assert abandoned is None and len(resumed['runs']) == 2
    validate(resumed)
    other = dict(journal, fingerprint='0' * 64)
    fresh, abandoned, _n = opened(['a', 'b'], previous=other)
    validate(fresh)
    validate(abandoned)
    assert abandoned['status'] == 'abandoned'


def test_a_journal_the_schema_refuses():
    journal, _a, _n = opened(['a'])
    journal['hosts']['a']['phase'] = 'rebooting'
    with pytest.raises(jsonschema.ValidationError):
        validate(journal)


def test_every_host_failing_staging_over_the_budget_is_a_halt_with_its_reason():
    """docs/rollout.md: 'a halt always has its reason'. With a budget of 0 and every host failing
    staging, the closed journal is halted, says how many failed where, and validates."""
    journal, _a, _n = opened(['a', 'b'], max_failed=0)
    for host in ('a', 'b'):
        r.record(journal, host, 'stage_failed', NOW, {'message': 'staging failed: hub unreachable'})
    r.close_run(journal, NOW)
    assert journal['status'] == 'halted'
    assert journal['halt_reason'] == '2 host(s) failed (a, b), over the fleet-wide budget of 0 (failed staging: 2)'
    validate(journal)


@pytest.mark.parametrize('change', [{'halt_reason': ''}, {'halted': False, 'halt_reason': ''}])
def test_the_schema_refuses_a_halt_without_its_reason(change):
    journal, _a, _n = opened(['a'], failed=['x'], max_failed=0)
    r.close_run(journal, NOW)
    assert journal['status'] == 'halted'
    validate(journal)
    journal.update(change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(json.dumps(journal)), schema())
