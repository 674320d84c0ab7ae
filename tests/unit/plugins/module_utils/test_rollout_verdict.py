# -*- coding: utf-8 -*-
"""admit's verdict: the restart entry asks the journal once whether, and why not, a host goes on
(halt, stage_only, preview or go); the journal records stage_only or would_restart in the same call."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.inkling.fleet.plugins.action import rollout_journal as rj
from ansible_collections.inkling.fleet.plugins.module_utils import rollout as r
from ansible_collections.inkling.fleet.plugins.module_utils import rollout_store as rs
from test_rollout import live, stored

NOW = '2026-12-07T00:00:00Z'
TARGET = {'variant': 'sm90-patched', 'image': 'reg.lab/vllm:2', 'image_digest': 'sha256:' + 'b' * 64,
          'revision': 'main', 'served_model_name': 'inkling', 'vllm_args': [], 'env': {}}


@pytest.mark.parametrize('admitted,stage_only,check,unresolved,expected', [
    (False, True, True, ['image digest'], ('halt', None, {})),
    (True, True, True, ['image digest'], ('stage_only', 'stage_only', {})),
    (True, False, True, ['image digest', 'revision'],
     ('preview', 'would_restart', {'message': 'would restart: image digest, revision'})),
    (True, False, True, [], ('go', None, {})),
    (True, False, False, ['image digest'], ('go', None, {})),
    (True, False, False, None, ('go', None, {})),
])
def test_the_verdict(admitted, stage_only, check, unresolved, expected):
    assert r.admit_verdict(admitted, stage_only, check, unresolved) == expected
    assert expected[0] in r.VERDICTS


def staged(tmp_path, hosts=('a', 'b'), max_failed=0):
    journal, _ab, _n = r.open_run(None, dict((h, {'contract': dict(TARGET)}) for h in hosts), '20261207T000000Z',
                                  NOW, max_failed=max_failed)
    for host in hosts:
        r.record(journal, host, 'staged', NOW)
    stored(journal, tmp_path)


def admit(tmp_path, host, check_mode=False, **args):
    action = rj.ActionModule.__new__(rj.ActionModule)
    store = rs.Store(str(tmp_path))
    try:
        return action._do_admit(store, dict({'max_failed': 0, 'data': {}}, **args), host, {}, check_mode)
    finally:
        store.close()


def test_stage_only_is_recorded_by_admit(tmp_path):
    staged(tmp_path)
    out = admit(tmp_path, 'a', stage_only=True)
    assert (out['admitted'], out['verdict'], out['phase']) == (True, 'stage_only', 'stage_only')
    assert live(tmp_path)['hosts']['a']['phase'] == 'stage_only'
    assert live(tmp_path)['hosts']['b']['phase'] == 'staged'


def test_a_preview_records_what_it_cannot_know_before_staging(tmp_path):
    staged(tmp_path)
    out = admit(tmp_path, 'a', check_mode=True, unresolved=['image digest'])
    assert (out['verdict'], out['phase']) == ('preview', 'would_restart')
    rec = live(tmp_path)['hosts']['a']
    assert rec['phase'] == 'would_restart' and rec['message'] == 'would restart: image digest'
    # without unresolved parts the preview goes on to the unit and the decision
    out = admit(tmp_path, 'b', check_mode=True, unresolved=[])
    assert (out['verdict'], out['phase']) == ('go', 'staged')


def test_a_host_not_admitted_is_halted_and_nothing_else_is_recorded(tmp_path):
    staged(tmp_path)
    action = rj.ActionModule.__new__(rj.ActionModule)
    store = rs.Store(str(tmp_path))
    try:
        action._do_record(store, {'phase': 'unit_refused', 'data': {'message': 'refused'}}, 'a', {}, False)
    finally:
        store.close()
    out = admit(tmp_path, 'b', stage_only=True)
    assert (out['admitted'], out['verdict'], out['announce']) == (False, 'halt', True)
    assert live(tmp_path)['hosts']['b']['phase'] == 'not_reached'


def test_a_refused_transition_fails_after_the_admit_is_kept(tmp_path):
    """stage_only from a phase that does not allow it fails as the separate record did, with the admit
    already committed."""
    journal, _ab, _n = r.open_run(None, {'a': {'contract': dict(TARGET)}}, '20261207T000000Z', NOW)
    stored(journal, tmp_path)    # 'a' is pending: stage_only is no transition from there
    with pytest.raises(r.TransitionError):
        admit(tmp_path, 'a', stage_only=True)
    assert live(tmp_path)['hosts']['a']['phase'] == 'pending'
