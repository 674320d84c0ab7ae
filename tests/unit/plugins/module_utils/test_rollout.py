# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's controller decisions (plugins/module_utils/rollout.py): the per-host state
machine, the failure budget checked before every host, resume by fingerprint, closing, and
the report's totals over every run of a resumed rollout."""

import itertools
import json
import os
import re

import jsonschema
import pytest

from ansible_collections.inkling.fleet.plugins.action import rollout_journal as rj
from ansible_collections.inkling.fleet.plugins.module_utils import analysis as an
from ansible_collections.inkling.fleet.plugins.module_utils import rollout as r
from ansible_collections.inkling.fleet.plugins.module_utils import rollout_store as rs

NOW = '2026-12-01T10:00:00Z'
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
T0 = 1796000000.0
H200 = {'variant': 'sm90-patched', 'image': 'reg.lab/vllm:1', 'image_digest': 'sha256:' + 'a' * 64,
        'revision': 'main', 'served_model_name': 'inkling', 'vllm_args': ['--tp', '8'], 'env': {}}
B200 = dict(H200, variant='sm100', image='reg.lab/vllm-b:1')


def outcomes(ok=(), failed=()):
    out = dict((h, {'contract': dict(H200, host=h)}) for h in ok)
    out.update((h, {'failed': '%s: GPU 7 missing' % h}) for h in failed)
    return out


def opened(ok=('a', 'b', 'c'), failed=(), previous=None, max_failed=0, min_healthy=1):
    journal, abandoned, notice = r.open_run(previous, outcomes(ok, failed), 'RUN2', NOW,
                                            min_healthy=min_healthy, max_failed=max_failed)
    return journal, abandoned, notice


def walk(journal, host, phases, t=None):
    t = T0 if t is None else t
    for i, phase in enumerate(phases):
        data = {}
        if phase == 'restarting':
            data['t_stop'] = t
        if phase in ('serving_new', 'rolled_back'):
            data['t_ready'] = t + 30 + i
        r.record(journal, host, phase, NOW, data)


# -- the state machine ------------------------------------------------------------------------

# The state machine as docs/rollout.md states it, written out here on its own: the pairwise
# test below checks the code against this, not against the code's own table.
EXPECTED = {
    None: {'pending', 'excluded'},
    'pending': {'staged', 'stage_failed', 'not_reached'},
    'staged': {'unchanged', 'would_restart', 'stage_only', 'not_reached', 'unit_refused', 'recheck_failed',
               'trial_failed', 'draining'},
    'draining': {'drain_failed', 'restarting', 'replica_held', 'replica_held_undrain_failed'},
    'restarting': {'serving_new', 'rolling_back'},
    'serving_new': {'done', 'undrain_failed'},
    'rolling_back': {'rolled_back', 'rollback_undrain_failed', 'rollback_failed', 'removed'},
}
EXPECTED_FAILED = {'excluded', 'stage_failed', 'unit_refused', 'recheck_failed', 'trial_failed', 'drain_failed',
                   'undrain_failed', 'rolled_back', 'rollback_undrain_failed', 'rollback_failed', 'removed',
                   'interrupted', 'replica_held', 'replica_held_undrain_failed'}

ALL_PHASES = sorted(set(r.TERMINAL) | set(itertools.chain(*EXPECTED.values())) | set(p for p in EXPECTED if p))


# A resumed run's entries into a restart the killed run left under way: allowed from 'staged' only to a
# host whose resume plan says so (test_resume_*).
RESUME_EXPECTED = {'restarting': {'stop', 'start', 'gate'}, 'rolling_back': {'rollback', 'rollback_gate'},
                   'serving_new': {'undrain'}}


def test_the_code_has_the_documented_state_machine():
    table = dict((k, set(v)) for k, v in EXPECTED.items())
    table['staged'] |= set(RESUME_EXPECTED)
    assert dict((k, set(v)) for k, v in r.TRANSITIONS.items()) == table
    assert dict((k, set(v)) for k, v in r.RESUME_ENTRY.items()) == RESUME_EXPECTED
    assert set(r.FAILED) == EXPECTED_FAILED


def path_to(phase):
    """A legal path from open (pending) to ``phase``."""
    paths = {'pending': []}
    queue = ['pending']
    while queue:
        cur = queue.pop(0)
        for nxt in sorted(EXPECTED.get(cur, ())):
            if nxt not in paths:
                paths[nxt] = paths[cur] + [nxt]
                queue.append(nxt)
    return paths[phase]


@pytest.mark.parametrize('src,dst', [(s, d) for s in ALL_PHASES for d in ALL_PHASES if s != 'excluded'
                                     and s != 'interrupted'])
def test_every_transition_is_allowed_exactly_when_the_table_says(src, dst):
    journal, _a, _n = opened(ok=('a',))
    walk(journal, 'a', path_to(src))
    assert journal['hosts']['a']['phase'] == src
    if dst in EXPECTED.get(src, ()):
        r.record(journal, 'a', dst, NOW)
        assert journal['hosts']['a']['phase'] == dst
    elif src == 'staged' and dst in RESUME_EXPECTED:
        with pytest.raises(r.TransitionError, match='staged -> %s is a resumed run finishing a restart' % dst):
            r.record(journal, 'a', dst, NOW)
        assert journal['hosts']['a']['phase'] == src
    else:
        with pytest.raises(r.TransitionError, match='%s -> %s is not a transition' % (src, dst)):
            r.record(journal, 'a', dst, NOW)
        assert journal['hosts']['a']['phase'] == src


def test_every_phase_is_reachable_and_every_non_terminal_phase_can_end():
    for phase in ALL_PHASES:
        if phase in ('excluded', 'interrupted'):
            continue
        assert path_to(phase) is not None
    for phase in r.TRANSITIONS:
        if phase is not None:
            assert phase not in r.TERMINAL
    for phase in r.TERMINAL:
        assert phase not in r.TRANSITIONS


def test_an_excluded_host_cannot_be_touched_later():
    journal, _a, _n = opened(ok=('a',), failed=('x',), max_failed=5)
    assert journal['hosts']['x']['phase'] == 'excluded'
    for phase in ('staged', 'draining', 'restarting'):
        with pytest.raises(r.TransitionError):
            r.record(journal, 'x', phase, NOW)
    assert r.admit(journal, 'x', 5, NOW) == (False, False)


def test_an_unknown_host_is_refused():
    journal, _a, _n = opened(ok=('a',))
    with pytest.raises(r.TransitionError, match='zz is not part of rollout RUN2'):
        r.record(journal, 'zz', 'staged', NOW)


# -- the failure budget -------------------------------------------------------------------------

def test_budget_zero_with_a_host_set_aside_touches_no_other_host():
    journal, _a, _n = opened(ok=('a', 'b'), failed=('x',), max_failed=0)
    assert journal['halted']
    assert journal['halt_reason'] == '1 host(s) failed (x), over the fleet-wide budget of 0 (set aside by preflight: 1)'
    first = r.admit(journal, 'a', 0, NOW)
    second = r.admit(journal, 'b', 0, NOW)
    assert first == (False, True) and second == (False, False)  # the halt is announced once
    assert journal['hosts']['a']['phase'] == journal['hosts']['b']['phase'] == 'not_reached'


def test_budget_is_checked_before_every_host_not_after_the_batch():
    journal, _a, _n = opened(ok=('a', 'b', 'c'), max_failed=0)
    for h in ('a', 'b', 'c'):
        assert r.admit(journal, h, 0, NOW) == (True, False)
        r.record(journal, h, 'staged', NOW)
    assert r.admit(journal, 'a', 0, NOW)[0]
    walk(journal, 'a', ['draining', 'restarting', 'rolling_back', 'rolled_back'])
    assert r.admit(journal, 'b', 0, NOW) == (False, True)
    assert journal['hosts']['b']['phase'] == 'not_reached'
    assert journal['hosts']['b']['message'] == ('not reached: 1 host(s) failed (a), over the fleet-wide budget of 0 '
                                                '(rolled back: 1)')


@pytest.mark.parametrize('phase_path', [
    ['stage_failed'], ['staged', 'unit_refused'], ['staged', 'recheck_failed'],
    ['staged', 'trial_failed'], ['staged', 'draining', 'drain_failed'],
    ['staged', 'draining', 'restarting', 'serving_new', 'undrain_failed'],
    ['staged', 'draining', 'restarting', 'rolling_back', 'rolled_back'],
    ['staged', 'draining', 'restarting', 'rolling_back', 'rollback_failed'],
    ['staged', 'draining', 'restarting', 'rolling_back', 'removed'],
])
def test_every_failure_counts_against_the_budget(phase_path):
    journal, _a, _n = opened(ok=('a', 'b'), max_failed=0)
    walk(journal, 'a', phase_path)
    assert r.failed_hosts(journal) == ['a']
    assert r.admit(journal, 'b', 0, NOW)[0] is False


@pytest.mark.parametrize('phase_path', [['staged', 'unchanged'], ['staged', 'would_restart'],
                                        ['staged', 'draining', 'restarting', 'serving_new', 'done']])
def test_success_does_not_count(phase_path):
    journal, _a, _n = opened(ok=('a', 'b'), max_failed=0)
    walk(journal, 'a', phase_path)
    assert r.failed_hosts(journal) == []
    assert r.admit(journal, 'b', 0, NOW) == (True, False)


def test_budget_of_one_tolerates_one_failure():
    journal, _a, _n = opened(ok=('a', 'b', 'c'), max_failed=1)
    walk(journal, 'a', ['stage_failed'])
    assert r.admit(journal, 'b', 1, NOW)[0]
    walk(journal, 'b', ['staged', 'draining', 'drain_failed'])
    assert r.admit(journal, 'c', 1, NOW) == (False, True)


def test_too_few_healthy_hosts_halts_before_anything_changes():
    journal, _a, _n = opened(ok=('a',), failed=('x', 'y'), max_failed=10, min_healthy=2)
    assert journal['halted']
    assert journal['halt_reason'].startswith('only 1 of 3 hosts passed preflight (x, y failed); '
                                             'rollout_min_healthy_hosts is 2. Nothing was changed.')
    assert r.admit(journal, 'a', 10, NOW)[0] is False


# -- undrain and drain semantics ----------------------------------------------------------------

def test_undrain_failure_serves_the_new_version_and_is_not_a_rollback():
    journal, _a, _n = opened(ok=('a',), max_failed=3)
    walk(journal, 'a', ['staged', 'draining', 'restarting', 'serving_new'])
    r.record(journal, 'a', 'undrain_failed', NOW, {'message': 'undrain failed: HTTP 500'})
    view = r.host_view(journal['hosts']['a'])
    assert view['state'] == 'serving the new version, but NOT undrained'
    assert view['rolled_back'] is False and view['failed'] is True and view['restarts'] == 1
    assert 'put it back into the load balancer by hand' in view['remedy']


def test_drain_failure_is_not_a_restart():
    journal, _a, _n = opened(ok=('a',), max_failed=3)
    walk(journal, 'a', ['staged', 'draining', 'drain_failed'])
    view = r.host_view(journal['hosts']['a'])
    assert view['restarts'] == 0 and view['unavailable_s'] is None
    assert view['state'] == 'drain failed, not stopped: serving its current version'


# -- resume and fingerprint ---------------------------------------------------------------------

def interrupted_journal():
    journal, _a, _n = opened(ok=('a', 'b'), max_failed=0)
    walk(journal, 'a', ['staged', 'draining', 'restarting', 'serving_new', 'done'])
    walk(journal, 'b', ['staged', 'draining', 'restarting'], t=T0 + 100)  # killed mid-restart
    return journal


def test_same_deployment_resumes_and_the_report_keeps_the_first_runs_restarts():
    first = interrupted_journal()
    journal, abandoned, notice = r.open_run(first, outcomes(('a', 'b')), 'RUN3', NOW)
    assert abandoned is None and journal['id'] == 'RUN2' and len(journal['runs']) == 2
    assert notice.startswith('Resuming interrupted rollout RUN2 (run 2 of it)')
    # second run: a is unchanged now; b was killed as its stop began (no step recorded): it is stopped and
    # started without a new drain, and its outage goes on from the first run's stop
    assert journal['hosts']['b']['resume'] == 'stop' and 'resume' not in journal['hosts']['a']
    walk(journal, 'a', ['staged', 'unchanged'])
    walk(journal, 'b', ['staged', 'restarting', 'serving_new', 'done'], t=T0 + 500)
    r.close_run(journal, NOW)
    assert journal['status'] == 'completed'
    a = r.host_view(journal['hosts']['a'])
    assert a['restarts'] == 1 and a['unavailable_s'] == 33.0  # from the first run
    b = r.host_view(journal['hosts']['b'])
    assert b['restarts'] == 1  # the interrupted one, finished by run 2
    assert [e['phase'] for e in journal['hosts']['b']['events']].count('interrupted') == 1
    # issue 37: every outage counts from its stop to its ready, across runs. b was stopped at 100 and was ready
    # in run 2 at 532: 432 s, not the 32 s of run 2 alone
    assert b['unavailable_s'] == 432.0 and journal['hosts']['b']['restarts'][0]['resumed_by'] == 2
    text = r.render_markdown(journal)
    assert '| a | 1 | 0.0 | 33.0 | 33.0 |' in text
    assert '| b | 1 | 100.0 | 532.0 | 432.0 |' in text
    lines = r.summary_lines(journal)
    assert any(line.startswith('a: unchanged: already serving the target') and 'restarts=1 unavailable=33.0s'
               in line for line in lines)


def test_an_outage_a_killed_run_left_open_ends_when_the_next_run_finds_the_host_serving():
    """Killed during the gate: the host came up on the new unit by itself. The resumed run finds it serving its
    target (unchanged): the first outage counts until then, and the host is not reported 'not back'."""
    first = interrupted_journal()
    journal, dummy, dummy = r.open_run(first, outcomes(('a', 'b')), 'RUN3', NOW)
    walk(journal, 'a', ['staged', 'unchanged'])
    r.record(journal, 'b', 'staged', NOW)
    r.record(journal, 'b', 'unchanged', NOW, {'t_seen': T0 + 160})
    r.close_run(journal, NOW)
    b = r.host_view(journal['hosts']['b'])
    assert b['restarts'] == 1 and b['unavailable_s'] == 60.0 and not b['not_back']
    restart = journal['hosts']['b']['restarts'][0]
    assert restart['t_end'] == T0 + 160 and restart['ended'] == 'found serving its target by run 2'
    assert restart['t_ready'] is None and restart['interrupted'] is True
    text = r.render_markdown(journal)
    assert '| b | 1 | 100.0 | 160.0 (interrupted: found serving its target by run 2) | 60.0 |' in text
    with open(os.path.join(REPO_ROOT, 'docs', 'report-schema.json')) as f:
        restarts = json.load(f)['properties']['hosts']['additionalProperties']['properties']['restarts']
    jsonschema.validate(journal['hosts']['b']['restarts'], restarts)
    # an outage no later run observed stays open: 'not back'
    lone = interrupted_journal()
    journal2, dummy, dummy = r.open_run(lone, outcomes(('a',)), 'RUN3', NOW)
    assert journal2['hosts']['b']['phase'] == 'interrupted'
    assert r.host_view(journal2['hosts']['b'])['not_back'] is True
    assert journal2['hosts']['b']['restarts'][0].get('t_end') is None


def test_another_deployment_abandons_the_interrupted_run():
    first = interrupted_journal()
    other = dict((h, {'contract': dict(B200, host=h)}) for h in ('a', 'b'))
    journal, abandoned, notice = r.open_run(first, other, 'RUN3', NOW)
    assert journal['id'] == 'RUN3' and len(journal['runs']) == 1 and journal['hosts']['a']['events'][0]['phase'] \
        == 'pending'
    assert abandoned['id'] == 'RUN2' and abandoned['status'] == 'abandoned'
    assert 'targets another deployment' in abandoned['halt_reason']
    assert notice == ('Interrupted rollout RUN2 targeted another deployment: closed as abandoned; starting '
                      'rollout RUN3')
    assert journal['notices'] == [notice]


def test_a_finished_run_is_never_resumed():
    first = interrupted_journal()
    r.close_run(first, NOW)
    journal, abandoned, _n = r.open_run(first, outcomes(('a', 'b')), 'RUN3', NOW)
    assert journal['id'] == 'RUN3' and abandoned is None


def test_fingerprint_ignores_hosts_and_order_but_not_targets():
    one = {'x': dict(H200, host='x'), 'y': dict(B200, host='y')}
    two = {'q': dict(B200, host='q'), 'p': dict(H200, host='p'), 'r': dict(H200, host='r')}
    assert r.fingerprint(one) == r.fingerprint(two)
    changed = {'x': dict(H200, image_digest='sha256:' + 'b' * 64)}
    assert r.fingerprint(changed) != r.fingerprint({'x': H200})
    assert r.fingerprint({'x': dict(H200, revision='other')}) != r.fingerprint({'x': H200})


# -- closing and the report ---------------------------------------------------------------------

def test_every_host_failing_staging_still_closes_with_a_report():
    journal, _a, _n = opened(ok=('a', 'b'), max_failed=5)
    for h in ('a', 'b'):
        r.record(journal, h, 'stage_failed', NOW, {'message': 'staging failed: hub unreachable'})
    r.close_run(journal, NOW)
    assert journal['status'] == 'completed with failures'
    assert journal['failed_hosts'] == ['a', 'b']
    text = r.render_markdown(journal)
    assert text.count('staging failed: hub unreachable') >= 2
    assert 'No host was stopped.' in text


def test_close_marks_hosts_left_mid_way_and_aborts():
    journal, _a, _n = opened(ok=('a', 'b'))
    walk(journal, 'a', ['staged', 'draining', 'restarting'])
    r.record(journal, 'b', 'staged', NOW)
    r.close_run(journal, NOW)
    assert journal['status'] == 'aborted'
    assert journal['abort_reason'] == 'hosts left mid-way: a (restarting), b (staged)'


def test_close_after_a_halt_marks_the_rest_not_reached():
    journal, _a, _n = opened(ok=('a', 'b'), failed=('x',))
    r.close_run(journal, NOW)
    assert journal['status'] == 'halted'
    assert journal['hosts']['a']['phase'] == 'not_reached'
    lines = r.summary_lines(journal)
    assert lines[-1].startswith('Halted: 1 host(s) failed (x)')
    assert sum(1 for line in lines if 'Halted' in line) == 1


def test_report_chart_bars_where_hosts_were_down():
    journal, _a, _n = opened(ok=('h-a', 'h-b', 'h-c'), max_failed=3)
    r.record(journal, 'h-a', 'staged', NOW)
    r.record(journal, 'h-a', 'draining', NOW)
    r.record(journal, 'h-a', 'restarting', NOW, {'t_stop': T0})
    r.record(journal, 'h-a', 'serving_new', NOW, {'t_ready': T0 + 30})
    r.record(journal, 'h-b', 'staged', NOW)
    r.record(journal, 'h-b', 'draining', NOW)
    r.record(journal, 'h-b', 'restarting', NOW, {'t_stop': T0 + 30})
    r.record(journal, 'h-b', 'rolling_back', NOW, {'message': 'gate failed | x'})
    r.record(journal, 'h-b', 'rolled_back', NOW, {'t_ready': T0 + 60})
    r.record(journal, 'h-c', 'staged', NOW)
    r.record(journal, 'h-c', 'unchanged', NOW)
    text = r.render_markdown(journal)
    block = text.split('```text\n', 1)[1].split('```', 1)[0]
    rows = dict(re.match(r'^(\S+)\s+\|(.*)\|$', line).groups() for line in block.splitlines())
    assert set(rows) == {'h-a', 'h-b'}
    assert rows['h-a'] == '#' * 30 + ' ' * 30 and rows['h-b'] == ' ' * 30 + '#' * 30
    assert 'down 30.0 s (failed) :crit, %d, %d' % (T0 + 30, T0 + 60) in text
    assert 'gate failed / x' in text  # a pipe cannot break the table
    assert '| h-b | rolled back: serving its previous version |' in text


# -- what the report says a host serves, and why a host restarts ---------------------------------

OLD = {'variant': 'sm90-patched', 'image': 'reg/x@sha256:' + '1' * 64, 'image_digest': 'sha256:' + '1' * 64,
       'revision': 'a' * 40, 'unit_checksum': 'c1'}
NEW = dict(OLD, image='reg/x@sha256:' + '2' * 64, image_digest='sha256:' + '2' * 64, unit_checksum='c2')


def test_hosts_not_restarted_report_what_they_serve_and_rolled_back_hosts_the_restored_version():
    outs = dict((h, {'contract': dict(H200, host=h), 'current': OLD}) for h in ('a', 'b'))
    journal, _a, _n = r.open_run(None, outs, 'RUN', NOW, max_failed=0)
    walk(journal, 'a', ['staged', 'draining', 'restarting'])
    r.record(journal, 'a', 'rolling_back', NOW, {'after': NEW, 'message': 'gate failed'})
    r.record(journal, 'a', 'rolled_back', NOW, {'t_ready': T0 + 9})
    assert r.admit(journal, 'b', 0, NOW)[0] is False
    lines = r.summary_lines(journal)
    assert lines[1].startswith('a: rolled back: serving its previous version; variant=sm90-patched '
                               'image=sha256:111111111111 revision=aaaaaaaaaaaa restarts=1')
    assert lines[2].startswith('b: not reached: serving its current version; variant=sm90-patched '
                               'image=sha256:111111111111')


@pytest.mark.parametrize('before,after,active,changed,reasons', [
    (OLD, dict(OLD), True, False, []),
    (OLD, NEW, True, True, ['image sha256:111111111111 -> sha256:222222222222']),
    (OLD, dict(OLD, revision='b' * 40, unit_checksum='c3'), True, False, ['model revision aaaaaaaaaaaa -> bbbbbbbbbbbb']),
    (OLD, dict(OLD, variant='sm90-upstream', unit_checksum='c3'), True, False, ['variant sm90-patched -> sm90-upstream']),
    (OLD, dict(OLD, unit_checksum='c3'), True, False, ['the unit changed (arguments, environment or mounts)']),
    (OLD, dict(OLD), True, True, ['the unit changed (arguments, environment or mounts)']),
    ({}, NEW, False, True, ['the service is not active (first deployment on this host)']),
    (OLD, dict(OLD), False, False, ['the service is not active']),
])
def test_restart_reasons(before, after, active, changed, reasons):
    assert r.restart_reasons(before, after, active, changed) == reasons


# -- the canary analysis in the journal -----------------------------------------------------------

MULTIPLY = {'id': 'arithmetic-multiply', 'prompt': 'What is 17 multiplied by 23? Answer with the number only.',
            'max_tokens': 16, 'expect': {'number': 391}}


def load(ttft, tps):
    return {'requests': 16, 'concurrency': 16, 'max_tokens': 128, 'errors': 0, 'ttft_p50_s': ttft,
            'output_tokens': 2048, 'wall_s': 20.0, 'output_tokens_per_s': tps}


def analysed(answer, perf=None, old_perf=None):
    """The journal's copy (what analysis_compact gives the record) of one host's analysis of one prompt
    answered ``answer``, against an old version that answered right."""
    results = [an.judge_prompt(MULTIPLY, {'status': 200, 'content': answer, 'finish_reason': 'stop'})]
    return an.compact(an.verdict(results, perf, {'answers': {MULTIPLY['id']: '391'}, 'perf': old_perf,
                                                 'source': 'live'}))


PASSED = analysed('391', perf=load(0.52, 98.0), old_perf=load(0.5, 100.0))
GARBAGE = analysed('!' * 16)
CAUSE = "prompt arithmetic-multiply: expected the number 391, got '!!!!!!!!!!!!!!!!'"


def mixed(hosts):
    """Opened journal over ``hosts`` (name -> contract), budget 5: only the canary rule halts."""
    outs = dict((h, {'contract': dict(c, host=h)}) for h, c in hosts.items())
    journal, _a, _n = r.open_run(None, outs, 'RUN', NOW, max_failed=5)
    return journal


def restart(journal, host, end, analysis, t=T0):
    """staged -> draining -> restarting -> ``end`` (serving_new or rolling_back) with ``analysis``."""
    walk(journal, host, ['staged', 'draining', 'restarting'], t=t)
    data = {'analysis': analysis}
    if end == 'serving_new':
        data['t_ready'] = t + 40
    else:
        data['message'] = 'canary analysis failed: ' + '; '.join(analysis.get('failures') or [])
    return r.record(journal, host, end, NOW, data)


def test_the_first_host_of_each_variant_to_drain_is_its_canary():
    journal = mixed({'h1': H200, 'h2': H200, 'b1': B200, 'b2': B200})
    for host in ('h1', 'b1', 'h2', 'b2'):
        walk(journal, host, ['staged', 'draining'])
    assert dict((h, rec['canary']) for h, rec in journal['hosts'].items()) == \
        {'h1': True, 'b1': True, 'h2': False, 'b2': False}
    assert journal['canaries'] == {'sm90-patched': 'h1', 'sm100': 'b1'}


def test_a_resumed_run_keeps_its_canary():
    journal = mixed({'h1': H200, 'h2': H200})
    walk(journal, 'h1', ['staged', 'draining', 'restarting', 'serving_new', 'done'])
    walk(journal, 'h2', ['staged', 'draining', 'restarting'])          # the run is killed here
    journal, _a, notice = r.open_run(journal, dict((h, {'contract': dict(H200, host=h)}) for h in ('h1', 'h2')),
                                     'RUN3', NOW, max_failed=5)
    assert notice.startswith('Resuming interrupted rollout RUN')
    walk(journal, 'h2', ['staged', 'draining'])
    assert journal['hosts']['h2']['canary'] is False and journal['hosts']['h1']['canary'] is True


def test_a_canary_that_passed_its_analysis_is_recorded_and_the_report_shows_the_analysis():
    journal = mixed({'h1': H200, 'h2': H200})
    rec = restart(journal, 'h1', 'serving_new', PASSED)
    r.record(journal, 'h1', 'done', NOW)
    assert rec['canary'] is True and rec['analysis'] == PASSED and rec['analysis']['passed'] is True
    assert not journal['halted'] and r.admit(journal, 'h2', 5, NOW) == (True, False)
    r.record(journal, 'h2', 'staged', NOW)
    r.record(journal, 'h2', 'unchanged', NOW)
    r.close_run(journal, NOW)
    assert journal['status'] == 'completed'
    text = r.render_markdown(journal)
    section = text.split('## Canary analysis\n', 1)[1].split('## Unavailability timeline', 1)[0]
    assert '| h1 | canary | passed | 1 of 1 | 100 % of 1 (80 %) | live | 0.5 -> 0.52 (+4 %) | ' \
        '100.0 -> 98.0 (-2 %) |' in section
    assert '### h1: passed' in section
    assert "| arithmetic-multiply | text | pass | the number 391 | '391' | yes |" in section
    assert 'h2' not in section            # no analysis recorded for it: not listed
    assert 'FAILED' not in section


def test_an_empty_analysis_is_not_recorded_and_gives_no_section():
    # analysis_compact gives {} when no analysis ran (the gate failed first, or rollout_analysis is off).
    journal = mixed({'h1': H200})
    rec = restart(journal, 'h1', 'serving_new', {})
    assert 'analysis' not in rec
    assert '## Canary analysis' not in r.render_markdown(journal)


def test_a_canary_failing_only_its_gate_follows_the_budget_not_the_canary_halt():
    journal = mixed({'h1': H200, 'h2': H200})
    walk(journal, 'h1', ['staged', 'draining', 'restarting'])
    r.record(journal, 'h1', 'rolling_back', NOW, {'message': 'gate failed: /health 503', 'analysis': {}})
    assert journal['hosts']['h1']['canary'] is True and not journal['halted']
    r.record(journal, 'h1', 'rolled_back', NOW, {'t_ready': T0 + 5})
    assert r.admit(journal, 'h2', 5, NOW) == (True, False)           # 1 failure, within the budget of 5


def test_a_canary_failing_its_analysis_halts_the_rollout_whatever_the_budget():
    journal = mixed({'h1': H200, 'h2': H200, 'b1': B200})
    restart(journal, 'h1', 'rolling_back', GARBAGE)
    assert journal['halted'] is True
    reason = journal['halt_reason']
    assert reason.startswith('the canary h1 of variant sm90-patched failed its analysis (' + CAUSE)
    assert "below the 80 % required); no other host is stopped. Remedy: read the analysis in the report" in reason
    r.record(journal, 'h1', 'rolled_back', NOW, {'t_ready': T0 + 60})
    # The budget (5) is far from spent: the halt is the canary's.
    assert r.failed_hosts(journal) == ['h1']
    assert r.admit(journal, 'h2', 5, NOW) == (False, True)
    assert r.admit(journal, 'b1', 5, NOW) == (False, False)
    assert journal['hosts']['h2']['phase'] == 'not_reached'
    assert journal['hosts']['h2']['message'] == 'not reached: ' + reason
    r.close_run(journal, NOW)
    assert journal['status'] == 'halted'
    assert r.summary_lines(journal)[-1].startswith('Halted: the canary h1 of variant sm90-patched failed its analysis')
    text = r.render_markdown(journal)
    assert '- **Halted:** the canary h1 of variant sm90-patched' in text
    section = text.split('## Canary analysis\n', 1)[1].split('## Unavailability timeline', 1)[0]
    assert '| h1 | canary | FAILED | 0 of 1 | 0 % of 1 (80 %) | live | - | - |' in section
    assert '### h1: FAILED' in section
    assert '- **' + CAUSE in section                                    # the cause, in words
    assert "| arithmetic-multiply | text | FAIL: expected the number 391, the first number is missing; one " \
        "character repeated ('!' x 16) | the number 391 | '!!!!!!!!!!!!!!!!' | no |" in section


def test_two_canaries_failing_side_by_side_keep_the_first_reason_and_note_the_second():
    journal = mixed({'h1': H200, 'h2': H200, 'b1': B200, 'b2': B200})
    restart(journal, 'h1', 'rolling_back', GARBAGE)
    first = journal['halt_reason']
    restart(journal, 'b1', 'rolling_back', GARBAGE)
    assert journal['halt_reason'] == first and first.startswith('the canary h1 of variant sm90-patched')
    assert journal['notices'][-1].startswith('also: the canary b1 of variant sm100 failed its analysis (' + CAUSE)


def test_the_canary_halt_names_the_variant_and_gives_a_cause_when_none_is_listed():
    journal = mixed({'b1': B200, 'b2': B200})
    restart(journal, 'b1', 'rolling_back', dict(GARBAGE, failures=[]))
    assert journal['halt_reason'].startswith('the canary b1 of variant sm100 failed its analysis (see the report); ')


@pytest.mark.parametrize('max_failed,admitted', [(1, (True, False)), (0, (False, True))])
def test_a_later_hosts_failed_analysis_is_recorded_and_counts_against_the_budget(max_failed, admitted):
    journal = mixed({'h1': H200, 'h2': H200, 'h3': H200})
    restart(journal, 'h1', 'serving_new', PASSED)
    r.record(journal, 'h1', 'done', NOW)
    rec = restart(journal, 'h2', 'rolling_back', GARBAGE, t=T0 + 100)
    assert rec['canary'] is False and rec['analysis']['passed'] is False
    assert not journal['halted']                                       # not a canary: no halt of its own
    r.record(journal, 'h2', 'rolled_back', NOW, {'t_ready': T0 + 160})
    assert r.failed_hosts(journal) == ['h2']
    assert r.admit(journal, 'h3', max_failed, NOW) == admitted
    if max_failed == 0:
        assert journal['halt_reason'] == '1 host(s) failed (h2), over the fleet-wide budget of 0 (rolled back: 1)'
    section = r.render_markdown(journal).split('## Canary analysis\n', 1)[1]
    assert '| h2 | later host | FAILED | 0 of 1 |' in section and '| h1 | canary | passed |' in section


def stored(journal, directory):
    """``journal`` in a journal store in ``directory``, as the action's open leaves it."""
    store = rs.Store(str(directory))
    store.create()
    store.begin()
    store.replace(journal)
    store.commit()
    store.close()


def act(action, directory, name, host, args):
    """One call of the journal action's ``name`` on the store in ``directory`` (no lock, no task)."""
    store = rs.Store(str(directory))
    try:
        return getattr(action, '_do_' + name)(store, args, host, {}, False)
    finally:
        store.close()


def live(directory):
    store = rs.Store(str(directory))
    try:
        store.begin_read()
        return rs.live_journal(store)
    finally:
        store.close()


def test_the_journal_action_says_whether_the_host_is_a_canary_and_whether_the_rollout_halted(tmp_path):
    stored(dict(mixed({'h1': H200, 'h2': H200}), id='20261201T100000Z'), tmp_path)   # a run id, as the store checks
    action = rj.ActionModule.__new__(rj.ActionModule)     # _do_record uses no state of the plugin

    def record(host, phase, data=None):
        return act(action, tmp_path, 'record', host, {'phase': phase, 'data': data or {}})

    for phase in ('staged', 'draining'):
        out = record('h1', phase)
    assert out == {'phase': 'draining', 'msg': 'h1: draining', 'canary': True, 'halted': False}
    record('h2', 'staged')
    assert record('h2', 'draining')['canary'] is False
    record('h1', 'restarting')
    out = record('h1', 'rolling_back', {'message': 'canary analysis failed', 'analysis': GARBAGE})
    assert out['canary'] is True and out['halted'] is True
    written = live(tmp_path)
    assert written['halted'] is True and written['hosts']['h1']['analysis']['passed'] is False


def test_failures_over_the_budget_with_no_batch_left_still_halt_with_a_reason():
    """Every host failing staging with a budget of 0 (or the last batch's failures) ends 'halted' with
    the budget's reason, never 'completed with failures' with an empty halt_reason."""
    journal, _a, _n = opened(ok=('a', 'b'), max_failed=0)
    for h in ('a', 'b'):
        r.record(journal, h, 'stage_failed', NOW, {'message': 'staging failed: hub unreachable'})
    r.close_run(journal, NOW)
    assert journal['status'] == 'halted'
    assert journal['halt_reason'] == '2 host(s) failed (a, b), over the fleet-wide budget of 0 (failed staging: 2)'
    assert 'over the fleet-wide budget of 0' in r.render_markdown(journal)


def test_the_budget_halt_says_where_the_hosts_failed():
    """The halt reason counts the failed hosts by where they failed, against the budget; every
    failed phase has its words."""
    assert set(p for p, _w in r.FAILED_WORDS) == set(r.FAILED)
    journal, _a, _n = opened(ok=('a', 'b', 'c'), failed=('x',), max_failed=1)
    walk(journal, 'a', ['stage_failed'])
    walk(journal, 'b', ['stage_failed'])
    walk(journal, 'c', ['staged', 'draining', 'drain_failed'])
    r.close_run(journal, NOW)
    assert journal['status'] == 'halted'
    assert journal['halt_reason'] == ('4 host(s) failed (a, b, c, x), over the fleet-wide budget of 1 '
                                      '(set aside by preflight: 1, failed staging: 2, failed the drain: 1)')
    assert r.summary_lines(journal)[-1].startswith('Halted: 4 host(s) failed')


def test_a_rolled_back_host_whose_undrain_failed_is_reported_as_such():
    """Out of the load balancer after its rollback: the report must not say merely 'rolled back'."""
    journal, _a, _n = opened(ok=('a',), max_failed=5)
    for phase in ('staged', 'draining', 'restarting', 'rolling_back'):
        r.record(journal, 'a', phase, NOW, {'t_stop': 1.0} if phase == 'restarting' else None)
    r.record(journal, 'a', 'rollback_undrain_failed', NOW, {'t_ready': 5.0,
                                                            'message': 'rolled back, but the undrain hook failed: 503'})
    r.close_run(journal, NOW)
    assert journal['failed_hosts'] == ['a']
    text = r.render_markdown(journal)
    assert 'rolled back: serving its previous version, but NOT undrained' in text
    assert 'put it back into the load balancer by hand' in journal['hosts']['a']['remedy']
    restart = journal['hosts']['a']['restarts'][-1]
    assert restart['rolled_back'] and restart['unavailable_s'] == 4.0


# --- check_journal and concurrent_controller (issue 36, finding 12) ---

def test_check_journal_accepts_what_open_run_writes_and_names_each_problem():
    journal, dummy, dummy = r.open_run(None, {'h1': {'contract': {'variant': 'v'}}}, '20261204T100000Z-2', NOW,
                                       controller={'host': 'ctl', 'pid': 7, 'pid_start': 9})
    assert r.check_journal(json.loads(json.dumps(journal))) == []
    assert journal['controller'] == {'host': 'ctl', 'pid': 7, 'pid_start': 9}
    bad = dict(journal, id='x/../y', runs={}, hosts={'h1': 'pending', 'h2': {'restarts': [1]}})
    assert r.check_journal(bad) == ["id 'x/../y' is not a run id (YYYYMMDDTHHMMSSZ)",
                                    'runs is a dict, not a list', 'hosts.h1 is not an object',
                                    'hosts.h2.restarts holds an entry that is not an object']
    assert r.check_journal({'id': '20261204T100000Z'}) == ['hosts is missing']


def test_concurrent_controller_only_for_a_live_other_run_on_this_host():
    me = {'host': 'ctl', 'pid': 10, 'pid_start': 100}
    other = {'host': 'ctl', 'pid': 11, 'pid_start': 111}
    running = {'status': 'running', 'controller': other}
    assert r.concurrent_controller(running, me, lambda pid, start: True) == other
    assert r.concurrent_controller(running, me, lambda pid, start: False) is None       # it is gone
    assert r.concurrent_controller(dict(running, status='completed'), me, lambda p, s: True) is None
    assert r.concurrent_controller({'status': 'running', 'controller': me}, me, lambda p, s: True) is None
    assert r.concurrent_controller({'status': 'running', 'controller': dict(other, host='ctl2')}, me,
                                   lambda p, s: True) is None                             # cannot be checked
    assert r.concurrent_controller({'status': 'running'}, me, lambda p, s: True) is None  # written before 0.2.0


def test_a_killed_controller_not_yet_reaped_counts_as_gone():
    """A SIGKILLed ansible-playbook whose parent has not reaped it yet is a zombie: its /proc entry stays, with the
    same start time. It runs nothing: the next run resumes its rollout instead of being refused."""
    import os
    import signal
    import subprocess
    import time
    proc = subprocess.Popen(['sleep', '60'])
    try:
        alive = rj._start_ticks(proc.pid)
        assert alive is not None and rj._alive(proc.pid, alive)
        os.kill(proc.pid, signal.SIGKILL)
        time.sleep(0.3)          # not reaped: a zombie
        assert os.path.exists('/proc/%d' % proc.pid)
        assert not rj._alive(proc.pid, alive)
    finally:
        proc.kill()
        proc.wait()


# -- the restart record: one record per host, from one read of its state file (issue 38) --------------------------

RECORD_DEPLOYMENT = {'variant': 'sm90-patched', 'image': 'reg.example/vllm@sha256:' + 'b' * 64,
                     'image_digest': 'sha256:' + 'b' * 64, 'revision': 'c' * 40, 'served_model_name': 'inkling',
                     'vllm_args': ['--x'], 'entry': {'name': 'sm90-patched', 'replica': None}}
RECORD_SERVING = {'variant': 'sm90-patched', 'image': 'reg.example/vllm@sha256:' + 'a' * 64,
                  'image_digest': 'sha256:' + 'a' * 64, 'revision': 'c' * 40, 'unit_checksum': 'u1',
                  'analysis': {'answers': {'p': '391'}}}


def test_the_record_before_the_unit_is_written_has_what_the_host_serves_only():
    record = r.restart_record(RECORD_DEPLOYMENT, RECORD_SERVING)
    assert record == {'before': dict((k, v) for k, v in RECORD_SERVING.items() if k != 'analysis'),
                      'recorded_analysis': {'answers': {'p': '391'}}}
    assert 'analysis' in RECORD_SERVING   # the caller's state is not changed
    assert r.restart_record(RECORD_DEPLOYMENT, None) == {'before': {}, 'recorded_analysis': {}}


def test_the_record_names_the_target_and_why_the_host_restarts():
    record = r.restart_record(RECORD_DEPLOYMENT, RECORD_SERVING, {'active': True, 'unit_checksum': 'u2'}, ['--x'],
                              True, 'gate')
    assert record['after'] == {'variant': 'sm90-patched', 'image': RECORD_DEPLOYMENT['image'],
                               'image_digest': RECORD_DEPLOYMENT['image_digest'], 'revision': 'c' * 40,
                               'served_model_name': 'inkling', 'unit_checksum': 'u2', 'args': ['--x']}
    assert record['reasons'] == ['image sha256:aaaaaaaaaaaa -> sha256:bbbbbbbbbbbb']
    assert record['active'] is True and record['resume'] == 'gate'
    assert record['replica'] == {} and record['replica_worker'] is False
    # 'replica' is a key of every entry the module returns: a host whose unit changed does not keep it
    assert record['unit_kept'] is False
    same = dict(RECORD_SERVING, image=RECORD_DEPLOYMENT['image'], image_digest=RECORD_DEPLOYMENT['image_digest'],
                unit_checksum='u2')
    record = r.restart_record(RECORD_DEPLOYMENT, same, {'active': True, 'unit_checksum': 'u2'})
    assert record['reasons'] == [] and record['unit_kept'] is True
    record = r.restart_record(RECORD_DEPLOYMENT, {}, {'active': False, 'unit_checksum': 'u2'})
    assert record['reasons'] == ['the service is not active (first deployment on this host)']


def test_a_replica_member_is_never_resumed_and_knows_its_role():
    replica = {'name': 'r1', 'members': ['h1', 'h2'], 'head': 'h1', 'role': 'worker'}
    deployment = dict(RECORD_DEPLOYMENT, entry={'name': 'sm90-h100-2node', 'replica': replica})
    record = r.restart_record(deployment, RECORD_SERVING, {'active': True, 'unit_checksum': 'u1'}, [], False, 'stop')
    assert record['replica'] == replica and record['replica_worker'] is True
    assert record['resume'] == '' and record['unit_kept'] is True
