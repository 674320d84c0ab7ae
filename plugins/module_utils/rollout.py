# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's controller-side decisions, as pure functions over a journal (a dict).

The journal is the rollout's memory on the controller (``<rollout_report_dir>/journal.db``, with a
snapshot ``journal.json`` at open and close): which run this is, which hosts it acts on, every phase
each host went through with its time, every restart and rollback with the host's unavailability,
and whether the rollout halted. The action plugin ``inkling.fleet.rollout_journal`` keeps it in
``plugins/module_utils/rollout_store.py`` under a lock; every decision is made here and unit-tested
(tests/unit/plugins/module_utils/test_rollout.py):

* ``open_run``: start a run, or resume an interrupted one when it targets the same deployment
  (same fingerprint), or close an interrupted one as abandoned and start anew;
* ``record``: one phase transition of one host, checked against ``TRANSITIONS``;
* ``admit``: may this host still be touched? (the failure budget, checked before every host);
* ``close_run``: the run's final status, and the report (JSON and Markdown) and summary lines.

The per-host state machine (docs/rollout.md, "Phases of a host")::

    (open) -> pending | excluded
    pending -> staged | stage_failed | not_reached
    staged -> unchanged | would_restart | stage_only | not_reached | unit_refused | recheck_failed
              | trial_failed | draining
    draining -> drain_failed | restarting | replica_held | replica_held_undrain_failed
                (restarting: the old server is stopped; replica_held*: not stopped, held with its replica)
    restarting -> serving_new | rolling_back
    serving_new -> done | undrain_failed
    rolling_back -> rolled_back | rollback_undrain_failed | rollback_failed | removed
                    (rollback_undrain_failed: serving its previous version, out of the load balancer)

Terminal phases are the keys of ``TERMINAL``. Failed phases count against the failure budget.

The budget is kept as counters (``journal['counters']``: failed hosts, failed units, failed hosts
per phase, replicas), built from every host once by ``open_run`` and ``close_run`` and updated by
``record`` from the host's own record (and its replica's members): ``record``, ``record_step`` and
``admit`` work on a *view* of the journal, its run-level fields and the records of the host and of
its replica's members, and cost the same whatever the size of the fleet. Only when the budget is
spent does ``check_budget`` list the failed hosts (``halt_needed`` says when: the store then adds
them to the view), once per rollout.

Within a restart, the steps that change the host each have their own record, written before
the next step begins (``record_step``): ``draining`` is the intent (with the unit already
written), ``restarting`` the stop about to begin, then the steps ``stopped`` and ``started``,
the gate's result (``serving_new`` or ``rolling_back``), and in a rollback the steps
``rollback_restored`` and ``rollback_started``. A run killed mid-way is resumed from them
(``resume_plan``): a resumed run finishes what was under way instead of starting it again::

    staged -> restarting    (resume: the host was stopped, or started, by the killed run)
    staged -> rolling_back  (resume: the killed run was rolling the host back)
    staged -> serving_new   (resume: the host passed its gate; its undrain was not recorded)
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import hashlib
import json
import re

# 3: the fields of version 2; journal.json is a snapshot of the store (journal.db) at open and close,
# which code that reads version 2 refuses rather than resume from it.
JOURNAL_VERSION = 3

TRANSITIONS = {
    None: ('pending', 'excluded'),
    'pending': ('staged', 'stage_failed', 'not_reached'),
    'staged': ('unchanged', 'would_restart', 'stage_only', 'not_reached', 'unit_refused', 'recheck_failed',
               'trial_failed', 'draining', 'restarting', 'rolling_back', 'serving_new'),
    'draining': ('drain_failed', 'restarting', 'replica_held', 'replica_held_undrain_failed'),
    'restarting': ('serving_new', 'rolling_back'),
    'serving_new': ('done', 'undrain_failed'),
    'rolling_back': ('rolled_back', 'rollback_undrain_failed', 'rollback_failed', 'removed'),
}

# A resumed run's entry into a restart the killed run left under way (resume_plan): from 'staged'
# straight to the phase the host was in, only when its plan says so.
RESUME_ENTRY = {'restarting': ('stop', 'start', 'gate'), 'rolling_back': ('rollback', 'rollback_gate'),
                'serving_new': ('undrain',)}

# The steps inside a phase, each recorded before the next step begins (record_step): step -> its phase.
STEPS = {'stopped': 'restarting', 'started': 'restarting', 'rollback_restored': 'rolling_back',
         'rollback_started': 'rolling_back'}

# Ends of a failed gate: a resumed run of the same rollout keeps them and never restarts the host
# onto the deployment it failed again.
GATE_FAILED = ('rolled_back', 'rollback_undrain_failed', 'rollback_failed', 'removed')

# Terminal phase -> (failed?, what the host serves afterwards, in words).
TERMINAL = {
    'excluded': (True, 'set aside by preflight, not touched'),
    'stage_failed': (True, 'staging failed, not restarted: serving its current version'),
    'not_reached': (False, 'not reached: serving its current version'),
    'unit_refused': (True, 'unit refused, not restarted: serving its current version'),
    'recheck_failed': (True, 'failed its re-check before the drain, not stopped: serving its current version'),
    'trial_failed': (True, 'the new image failed its trial before the drain, not stopped: serving its current version'),
    'unchanged': (False, 'unchanged: already serving the target'),
    'stage_only': (False, 'staged, not restarted (rollout_stage_only): serving its current version'),
    'would_restart': (False, 'would restart (check mode: nothing was changed)'),
    'drain_failed': (True, 'drain failed, not stopped: serving its current version'),
    'replica_held': (True, 'held back with its replica (a member fell out before the stop), not stopped: serving its '
                           'current version'),
    'replica_held_undrain_failed': (True, 'held back with its replica, not stopped: serving its current version, but '
                                          'NOT undrained'),
    'done': (False, 'restarted: serving the new version'),
    'undrain_failed': (True, 'serving the new version, but NOT undrained'),
    'rolled_back': (True, 'rolled back: serving its previous version'),
    'rollback_undrain_failed': (True, 'rolled back: serving its previous version, but NOT undrained'),
    'rollback_failed': (True, 'rollback failed: NOT serving'),
    'interrupted': (True, 'interrupted mid-way by an earlier run and not part of this one: check the host'),
    'removed': (True, 'first deployment taken back: the new unit was removed, not serving'),
}

FAILED = frozenset(p for p, (failed, _words) in TERMINAL.items() if failed)

# Failed phase -> what the budget's halt reason says of its hosts (in the order of a host's path).
FAILED_WORDS = (('excluded', 'set aside by preflight'), ('interrupted', 'interrupted by an earlier run'),
                ('stage_failed', 'failed staging'), ('unit_refused', 'unit refused'),
                ('recheck_failed', 'failed the re-check'), ('trial_failed', 'failed the image trial'),
                ('drain_failed', 'failed the drain'), ('replica_held', 'held back with their replica'),
                ('replica_held_undrain_failed', 'held back with their replica, not undrained'),
                ('undrain_failed', 'not undrained'), ('rolled_back', 'rolled back'),
                ('rollback_undrain_failed', 'rolled back, not undrained'), ('rollback_failed', 'failed the rollback'),
                ('removed', 'new unit removed'))

# Remedies the report gives for phases that need an operator.
REMEDIES = {
    'undrain_failed': ('the host passed its gates and serves the new version; put it back into the load '
                       'balancer by hand (or fix the undrain hook and run the undrain command), it was not '
                       'rolled back'),
    'rollback_undrain_failed': ('the host was rolled back and serves its previous version, but the undrain hook '
                                'failed: put it back into the load balancer by hand (or fix the undrain hook and '
                                'run the undrain command)'),
    'replica_held_undrain_failed': ('the host was not stopped and serves its current version, but the undrain hook '
                                    'failed: put it back into the load balancer by hand (or fix the undrain hook and '
                                    'run the undrain command)'),
    'drain_failed': 'fix the drain hook (rollout_drain_command / rollout_drain_url) and run the rollout again',
    'rollback_failed': ('the host serves nothing: read `journalctl -u inkling-vllm` on it, fix the cause and run '
                        'the rollout again'),
}

# Keys of a deployment contract that name what is deployed (the fingerprint's input).
FINGERPRINT_KEYS = ('variant', 'image', 'image_digest', 'revision', 'served_model_name', 'vllm_args', 'env')


class TransitionError(ValueError):
    """A phase change the state machine does not allow (a bug in the playbook's sequence)."""


# A run id (open_run's run_id): the UTC start, with -N when two started in the same second. Reports
# are named after it, so a journal whose id is anything else is refused (it could name a path).
RUN_ID_RE = re.compile(r'^[0-9]{8}T[0-9]{6}Z(-[0-9]{1,6})?$')
PHASES = frozenset([p for p in TRANSITIONS if p] + [p for ps in TRANSITIONS.values() for p in ps] + list(TERMINAL))
_JOURNAL_TYPES = (('runs', list), ('hosts', dict), ('notices', list), ('replicas', dict), ('canaries', dict),
                  ('failed_hosts', list), ('controller', dict), ('status', str), ('fingerprint', str),
                  ('halt_reason', str), ('halted', bool), ('check_mode', bool))
_RECORD_TYPES = (('events', list), ('restarts', list), ('target', dict), ('before', dict), ('message', str),
                 ('failures', list))


def check_journal(data):
    """What makes ``data``, a journal read from disk, unusable by this code: a list of problems, empty
    when the engine can work on it. It checks what the engine and the reports rely on (the id that
    names the reports, the types of the parts it walks, the phases), not every field the schema
    (docs/report-schema.json) describes."""
    problems = []
    version = data.get('version')
    if version is not None and (not isinstance(version, int) or version > JOURNAL_VERSION):
        problems.append('version %r: this code reads journal version %d or older' % (version, JOURNAL_VERSION))
    if not isinstance(data.get('id'), str) or not RUN_ID_RE.match(data['id']):
        problems.append('id %r is not a run id (YYYYMMDDTHHMMSSZ)' % (data.get('id'),))
    for key, kind in _JOURNAL_TYPES:
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            problems.append('%s is a %s, not a%s %s' % (key, type(data[key]).__name__,
                                                        'n' if kind is dict else '', _TYPE_WORDS[kind]))
    if not isinstance(data.get('hosts'), dict):
        return problems + ([] if 'hosts' in data else ['hosts is missing'])
    for host, rec in sorted(data['hosts'].items()):
        if not isinstance(rec, dict):
            problems.append('hosts.%s is not an object' % host)
            continue
        if rec.get('phase') is not None and rec['phase'] not in PHASES:
            problems.append('hosts.%s.phase %r is not a phase of the rollout' % (host, rec['phase']))
        for key, kind in _RECORD_TYPES:
            if key in rec and not isinstance(rec[key], kind):
                problems.append('hosts.%s.%s is not a%s %s'
                                % (host, key, 'n' if kind is dict else '', _TYPE_WORDS[kind]))
        for key in ('events', 'restarts'):
            if isinstance(rec.get(key), list) and not all(isinstance(e, dict) for e in rec[key]):
                problems.append('hosts.%s.%s holds an entry that is not an object' % (host, key))
    for run in data.get('runs') or []:
        if not isinstance(run, dict):
            problems.append('runs holds an entry that is not an object')
            break
    return problems


_TYPE_WORDS = {list: 'list', dict: 'object', str: 'string', bool: 'boolean'}


def concurrent_controller(previous, me, is_alive):
    """The controller of a rollout that still runs in ``previous`` (its ``controller``: host, pid and
    pid_start of its ansible-playbook), when it is not ``me`` and ``is_alive(pid, pid_start)`` says it
    runs; else None. Only a controller on this host can be checked: one recorded by another host,
    or by code that recorded none, is taken as gone (resumed or abandoned as before)."""
    if not previous or previous.get('status') != 'running':
        return None
    owner = previous.get('controller')
    if not isinstance(owner, dict) or owner.get('host') != me.get('host'):
        return None
    if owner.get('pid') == me.get('pid') and owner.get('pid_start') == me.get('pid_start'):
        return None
    return owner if is_alive(owner.get('pid'), owner.get('pid_start')) else None


def fingerprint(contracts):
    """What the run deploys, independent of host names and order: a sha256 over the distinct
    targets (variant, image and digest, revision, arguments) of the hosts' contracts."""
    targets = set()
    for contract in (contracts or {}).values():
        if not contract:
            continue
        targets.add(json.dumps(dict((k, contract.get(k)) for k in FINGERPRINT_KEYS), sort_keys=True))
    return hashlib.sha256('\n'.join(sorted(targets)).encode('utf-8')).hexdigest()


def _event(record, run, phase, now, message=None):
    event = {'t': now, 'run': run, 'phase': phase}
    if message:
        event['message'] = message
    record.setdefault('events', []).append(event)


def new_journal(run_id, now, check_mode, fp):
    return {'version': JOURNAL_VERSION, 'id': run_id, 'started': now, 'status': 'running', 'check_mode': check_mode,
            'fingerprint': fp, 'runs': [{'run': 1, 'started': now}], 'hosts': {}, 'halted': False,
            'halt_reason': '', 'notices': []}


def open_run(previous, outcomes, run_id, now, check_mode=False, min_healthy=1, max_failed=0, controller=None):
    """Start or resume a run once preflight has been run on every host.

    ``previous``: the journal found on disk (or None). ``outcomes``: host -> {'contract': {...}}
    for a host that passed preflight, or {'failed': 'message'} for one that did not (an empty
    dict: the host never reported, e.g. unreachable). ``controller``: who runs this run (host, pid and
    pid_start of its ansible-playbook, see concurrent_controller), kept in the journal. Returns
    (journal, abandoned, notice):
    ``abandoned`` is the previous journal closed as abandoned (to be archived) or None.
    """
    replica_map = replicas_of(outcomes)
    outcomes = exclude_incomplete_replicas(outcomes)
    contracts = dict((h, o.get('contract')) for h, o in outcomes.items() if o.get('contract'))
    fp = fingerprint(contracts)
    abandoned = None
    if previous and previous.get('status') == 'running' and previous.get('fingerprint') == fp \
            and bool(previous.get('check_mode')) == bool(check_mode):
        journal = copy.deepcopy(previous)
        journal['version'] = JOURNAL_VERSION
        run = len(journal.get('runs', [])) + 1
        journal.setdefault('runs', []).append({'run': run, 'started': now})
        notice = 'Resuming interrupted rollout %s (run %d of it): same deployment (fingerprint %s)' % (
            journal['id'], run, fp[:12])
        for host, rec in journal['hosts'].items():
            phase = rec.get('phase')
            rec.pop('resume', None)
            if phase not in TERMINAL and phase is not None:
                _event(rec, run - 1, 'interrupted', previous.get('updated', now),
                       'the run stopped while this host was %s' % phase)
                for restart in rec.get('restarts', []):
                    if restart.get('t_ready') is None and not restart.get('interrupted'):
                        restart['interrupted'] = True
                if host not in outcomes:
                    rec['phase'] = 'interrupted'
                    rec['message'] = 'the run stopped while this host was %s; this run does not include it' % phase
                elif resume_plan(rec, phase):
                    rec['resume'] = resume_plan(rec, phase)
            if host in outcomes and phase in GATE_FAILED:
                _event(rec, run, 'kept', now, 'failed its gate for this deployment in run %s of this rollout: not '
                       'restarted onto it again' % _last_run_of(rec))
                continue
            if host in outcomes:
                rec['phase'] = None
    else:
        if previous and previous.get('status') == 'running':
            abandoned = copy.deepcopy(previous)
            abandoned['version'] = JOURNAL_VERSION
            abandoned.pop('counters', None)
            abandoned['status'] = 'abandoned'
            abandoned['finished'] = now
            abandoned['halt_reason'] = ('interrupted, and run %s targets another deployment (fingerprint %s, not %s)'
                                        % (run_id, fp[:12], str(previous.get('fingerprint', ''))[:12]))
            notice = ('Interrupted rollout %s targeted another deployment: closed as abandoned; starting rollout %s'
                      % (previous.get('id'), run_id))
        else:
            notice = 'Starting rollout %s' % run_id
        journal = new_journal(run_id, now, check_mode, fp)
        run = 1
        if abandoned:
            journal['notices'].append(notice)
    journal['updated'] = now
    if controller:
        journal['controller'] = dict(controller)
    for host in sorted(outcomes):
        outcome = outcomes[host]
        rec = journal['hosts'].setdefault(host, {'events': [], 'restarts': []})
        if rec.get('phase') in GATE_FAILED:
            continue
        # A new pass: an earlier run's message stays in the events, not on the host's line.
        rec.pop('message', None)
        rec.pop('remedy', None)
        if outcome.get('current'):
            rec['before'] = outcome['current']
        if outcome.get('contract'):
            rec['target'] = outcome['contract']
            _set_phase(rec, 'pending', run, now)
        else:
            rec.pop('resume', None)
            rec['message'] = outcome.get('failed') or 'no preflight result (host unreachable or the run stopped)'
            rec['failures'] = outcome.get('failures', [])
            _set_phase(rec, 'excluded', run, now, rec['message'])
    journal['replicas'] = dict((h, replica_map[h]) for h in sorted(replica_map))
    journal['counters'] = budget_counters(journal)
    journal['max_failed'] = int(max_failed)  # close_run checks it once more: a spent budget always halts
    healthy = sorted(h for h, o in outcomes.items() if o.get('contract'))
    healthy_units = sorted(set(unit_of(journal, h) for h in healthy))
    all_units = sorted(set(unit_of(journal, h) for h in outcomes))
    if len(healthy_units) < int(min_healthy):
        _halt(journal, 'only %d of %d %s passed preflight (%s failed); rollout_min_healthy_hosts is %d%s. Nothing '
              'was changed. Fix the failed hosts (see their preflight reports) or lower rollout_min_healthy_hosts'
              % (len(healthy_units), len(all_units), 'replicas' if replica_map else 'hosts',
                 ', '.join(unit_label(journal, u) for u in sorted(set(all_units) - set(healthy_units))) or 'none',
                 int(min_healthy), ' (it counts replicas; a host outside a replica is a replica of one)'
                 if replica_map else ''))
    else:
        check_budget(journal, max_failed)
    return journal, abandoned, notice


def resume_plan(rec, phase):
    """What a resumed run does first for a host the killed run left in ``phase`` (not terminal), from its
    records: '' (start the host's path afresh: nothing was stopped), 'stop' (the stop was about to begin or
    under way: stop, start and gate, without a new drain), 'start' (stopped, not started: start and gate),
    'gate' (started on the new unit: a fresh gate, no second restart), 'rollback' (its gate failed: roll back,
    never onto the failed deployment again), 'rollback_gate' (the previous unit was started again: gate it
    and undrain) or 'undrain' (it passed its gate: undrain)."""
    restarts = rec.get('restarts') or []
    last = restarts[-1] if restarts else {}
    steps = set(s.get('step') for s in last.get('steps') or []) if last.get('t_ready') is None else set()
    if phase == 'rolling_back':
        return 'rollback_gate' if 'rollback_started' in steps else 'rollback'
    if phase == 'restarting':
        return 'gate' if 'started' in steps else ('start' if 'stopped' in steps else 'stop')
    if phase == 'serving_new':
        return 'undrain'
    return ''


def _last_run_of(rec):
    runs = [e.get('run') for e in rec.get('events') or [] if e.get('phase') in GATE_FAILED]
    return runs[-1] if runs else '?'


def _set_phase(rec, phase, run, now, message=None):
    rec['phase'] = phase
    _event(rec, run, phase, now, message)


def current_run(journal):
    return len(journal.get('runs', [])) or 1


def failed_hosts(journal):
    return sorted(h for h, r in journal.get('hosts', {}).items() if r.get('phase') in FAILED)


def replicas_of(outcomes):
    """host -> replica name: the inventory's (``replica`` of an outcome), and the replica each
    passing host's contract names (entry.replica)."""
    out = dict((h, o['replica']) for h, o in outcomes.items() if o.get('replica'))
    for host, outcome in outcomes.items():
        info = (((outcome.get('contract') or {}).get('entry') or {}).get('replica') or {})
        if info.get('name'):
            for member in info.get('members') or [host]:
                out[member] = info['name']
    return out


def exclude_incomplete_replicas(outcomes):
    """A replica serves only with all its members: when one member failed preflight (or is not in
    the run), every member is set aside, naming the member(s) that failed."""
    outcomes = dict((h, dict(o)) for h, o in outcomes.items())
    for host, outcome in sorted(outcomes.items()):
        info = (((outcome.get('contract') or {}).get('entry') or {}).get('replica') or {})
        members = info.get('members') or []
        bad = [m for m in members if not (outcomes.get(m) or {}).get('contract')]
        if outcome.get('contract') and bad:
            outcome.pop('contract')
            outcome['failed'] = ('replica %s (%s) is set aside as a whole: %s did not pass preflight or is not in '
                                 'this run' % (info.get('name'), ', '.join(members), ', '.join(bad)))
    return outcomes


def unit_of(journal, host):
    """The unit of the budget and the batches: the host's replica, or the host itself."""
    name = (journal.get('replicas') or {}).get(host)
    return ('replica:' + name) if name else host


def unit_label(journal, unit):
    if not unit.startswith('replica:'):
        return unit
    name = unit.split(':', 1)[1]
    members = sorted(h for h, r in (journal.get('replicas') or {}).items() if r == name)
    return 'replica %s (%s)' % (name, ', '.join(members))


def failed_units(journal):
    return sorted(set(unit_of(journal, h) for h in failed_hosts(journal)))


def budget_counters(journal):
    """The failure budget's counters, from every host of a whole journal (open_run and close_run, once):
    failed hosts, failed units (replicas, or hosts outside one), failed hosts per failed phase, and how
    many replicas the fleet has."""
    failed = failed_hosts(journal)
    by_phase = {}
    for host in failed:
        phase = journal['hosts'][host]['phase']
        by_phase[phase] = by_phase.get(phase, 0) + 1
    return {'failed_hosts': len(failed), 'failed_units': len(set(unit_of(journal, h) for h in failed)),
            'failed_by_phase': by_phase, 'replicas': len(set((journal.get('replicas') or {}).values()))}


def counters(journal):
    """The journal's counters; built from its hosts when it has none (a journal of version 2)."""
    if not isinstance(journal.get('counters'), dict):
        journal['counters'] = budget_counters(journal)
    return journal['counters']


def _unit_failed_without(journal, host):
    """Whether another member of ``host``'s replica has failed (the view holds the replica's members)."""
    name = (journal.get('replicas') or {}).get(host)
    if not name:
        return False
    hosts = journal.get('hosts', {})
    return any(r == name and m != host and (hosts.get(m) or {}).get('phase') in FAILED
               for m, r in journal['replicas'].items())


def _count(journal, host, old, new):
    """Update the counters for one host's phase change ``old`` -> ``new`` (before the record takes it)."""
    was, failed = old in FAILED, new in FAILED
    if not was and not failed or old == new:
        return
    c = counters(journal)
    by_phase = c.setdefault('failed_by_phase', {})
    if was:
        by_phase[old] = by_phase.get(old, 0) - 1
        if by_phase[old] <= 0:
            del by_phase[old]
    if failed:
        by_phase[new] = by_phase.get(new, 0) + 1
    if was != failed:
        step = 1 if failed else -1
        c['failed_hosts'] = c.get('failed_hosts', 0) + step
        if not _unit_failed_without(journal, host):
            c['failed_units'] = c.get('failed_units', 0) + step


def _halt(journal, reason):
    journal['halted'] = True
    journal['halt_reason'] = reason


def halt_needed(journal, max_failed):
    """Whether check_budget is about to halt the rollout (O(1): the counters): the store then adds every
    failed host, and its replica's members, to the view, for the halt reason that names them."""
    return not journal.get('halted') and counters(journal).get('failed_units', 0) > int(max_failed)


def check_budget(journal, max_failed):
    """Halt the rollout when more replicas (a host outside a replica is a replica of one) failed
    than the budget allows. Returns True when the budget is spent (the rollout is halted). Decided
    on the counters; the reason lists the failed hosts of the journal (or of a view that holds them
    all, see halt_needed), once."""
    if halt_needed(journal, max_failed):
        failed = failed_units(journal)
        _halt(journal, '%d %s failed (%s), over the fleet-wide budget of %d (%s)'
              % (len(failed), 'replica(s)' if counters(journal).get('replicas') else 'host(s)',
                 ', '.join(unit_label(journal, u) for u in failed), int(max_failed), _failed_by_phase(journal)))
    return bool(journal.get('halted'))


def _failed_by_phase(journal):
    """How many hosts failed where, e.g. 'set aside by preflight: 1, failed staging: 2' (the counters)."""
    by_phase = counters(journal).get('failed_by_phase') or {}
    return ', '.join('%s: %d' % (words, by_phase[p]) for p, words in FAILED_WORDS if by_phase.get(p))


def published(journal):
    """The journal as journal.json, the reports and the action read give it: without its counters
    (they follow from the hosts)."""
    out = dict(journal)
    out.pop('counters', None)
    return out


def record(journal, host, phase, now, data=None):
    """One transition of one host. ``data`` may carry: message, before, after, gate, trial,
    t_stop / t_ready (epoch seconds, for restarts and rollbacks)."""
    data = dict(data or {})
    hosts = journal.setdefault('hosts', {})
    if host not in hosts:
        raise TransitionError('%s is not part of rollout %s' % (host, journal.get('id')))
    rec = hosts[host]
    old = rec.get('phase')
    if phase not in TRANSITIONS.get(old, ()):
        raise TransitionError('%s: %s -> %s is not a transition of the rollout (allowed from %s: %s)'
                              % (host, old, phase, old, ', '.join(TRANSITIONS.get(old, ())) or 'none'))
    resume = rec.pop('resume', '') if old == 'staged' else ''
    if old == 'staged' and phase in RESUME_ENTRY and resume not in RESUME_ENTRY[phase]:
        rec['resume'] = resume
        raise TransitionError('%s: staged -> %s is a resumed run finishing a restart the killed run left under way, '
                              'allowed only as the host\'s resume plan says (its resume plan: %s)'
                              % (host, phase, resume or 'none'))
    run = current_run(journal)
    message = data.pop('message', None)
    for key in ('before', 'after', 'gate', 'trial', 'staged', 'warm'):
        if key in data:
            rec[key] = data.pop(key)
    if 'analysis' in data:
        analysis = data.pop('analysis') or {}
        if analysis:
            rec['analysis'] = analysis
    if phase == 'draining':
        rec['canary'] = _canary(journal, host, rec)
    if phase == 'restarting' and resume and _open_restart(rec):
        # The same outage, continued: it counts from the killed run's stop to this run's ready.
        _open_restart(rec)['resumed_by'] = run
    elif phase == 'restarting':
        restarts = rec.setdefault('restarts', [])
        _end_interrupted(restarts, data.get('t_stop'), 'stopped again by run %d' % run)
        restarts.append({'run': run, 'kind': 'restart', 't_stop': data.get('t_stop', None),
                         't_ready': None, 'unavailable_s': None})
    elif phase == 'rolling_back' and resume and _open_restart(rec):
        _open_restart(rec)['resumed_by'] = run
    elif phase == 'unchanged':
        _end_interrupted(rec.get('restarts') or [], data.get('t_seen'), 'found serving its target by run %d' % run)
    elif phase in ('serving_new', 'rolled_back', 'rollback_undrain_failed'):
        _close_restart(rec, data.get('t_ready'), rolled_back=(phase != 'serving_new'))
    elif phase in ('rollback_failed', 'removed'):
        _close_restart(rec, None, rolled_back=False, failed=True)
    if phase in TERMINAL:
        rec.pop('resume', None)
    if message:
        rec['message'] = message
    elif phase in FAILED or phase == 'rolling_back':
        rec.setdefault('message', '')
    if phase in REMEDIES:
        rec['remedy'] = REMEDIES[phase]
    _count(journal, host, old, phase)
    _set_phase(rec, phase, run, now, message)
    if phase == 'rolling_back' and rec.get('canary') and (rec.get('analysis') or {}).get('passed') is False:
        # A bad build shows on its canary: no other host of the fleet is stopped for it, whatever the budget.
        cause = 'the canary %s of variant %s failed its analysis (%s)' % (
            host, canary_key(rec), '; '.join((rec['analysis'].get('failures') or ['see the report'])[:3]))
        if journal.get('halted'):
            # Canaries of other variants restart side by side: keep the first halt's reason, add this one.
            journal['notices'].append('also: ' + cause)
        else:
            _halt(journal, cause + '; no other host is stopped. Remedy: read the analysis in the report, fix the '
                  'image or the variant, and run again')
    journal['updated'] = now
    return rec


def _open_restart(rec):
    """The host's last restart while its outage is open (no ready, no end inferred), else None."""
    restarts = rec.get('restarts') or []
    if restarts and restarts[-1].get('t_ready') is None and restarts[-1].get('t_end') is None \
            and restarts[-1].get('t_stop') is not None and not restarts[-1].get('not_back'):
        return restarts[-1]
    return None


def record_step(journal, host, step, now, t=None):
    """One step inside the host's phase (STEPS: the stop done, the start done, the previous unit put back,
    the previous unit started), recorded before the next step begins, so that a resumed run knows how far
    the killed one got (resume_plan). Kept on the open restart, with its time."""
    rec = journal.get('hosts', {}).get(host)
    if rec is None:
        raise TransitionError('%s is not part of rollout %s' % (host, journal.get('id')))
    if step not in STEPS:
        raise TransitionError('%s is not a step of a restart (%s)' % (step, ', '.join(sorted(STEPS))))
    if rec.get('phase') != STEPS[step] or _open_restart(rec) is None:
        raise TransitionError('%s: step %s belongs to an open %s, and the host is %s'
                              % (host, step, STEPS[step], rec.get('phase')))
    run = current_run(journal)
    _open_restart(rec).setdefault('steps', []).append({'step': step, 't': t, 'run': run})
    _event(rec, run, step, now)
    journal['updated'] = now
    return rec


def canary_key(rec):
    """What a canary stands for: its target's variant (one canary per variant and run)."""
    return (rec.get('target') or {}).get('variant') or '-'


def _canary(journal, host, rec):
    """Whether ``host``, now draining, is the canary of its variant: the first host of that variant
    whose drain this rollout recorded (kept across resumed runs). O(1): a map variant -> host."""
    canaries = journal.setdefault('canaries', {})
    key = canary_key(rec)
    canaries.setdefault(key, host)
    return canaries[key] == host


def _end_interrupted(restarts, t_end, how):
    """An outage a killed run left open (its stop recorded, its ready never: open_run marked it interrupted) ends,
    as far as the journal can tell, when a later run stops the host again or finds it serving its target. It counts
    up to then, across runs, never as 0 s: an upper bound, since the host stayed drained all that time."""
    if not restarts or t_end is None:
        return
    last = restarts[-1]
    if not last.get('interrupted') or last.get('t_ready') is not None or last.get('t_stop') is None \
            or last.get('t_end') is not None:
        return
    last['t_end'] = t_end
    last['ended'] = how
    last['unavailable_s'] = round(max(float(t_end) - float(last['t_stop']), 0.0), 1)


def _close_restart(rec, t_ready, rolled_back, failed=False):
    restarts = rec.get('restarts') or []
    if not restarts or restarts[-1].get('t_ready') is not None:
        return
    last = restarts[-1]
    if rolled_back:
        last['rolled_back'] = True
    if failed:
        last['not_back'] = True
        return
    if t_ready is not None and last.get('t_stop') is not None:
        last['t_ready'] = t_ready
        last['unavailable_s'] = round(float(t_ready) - float(last['t_stop']), 1)


def admit(journal, host, max_failed, now):
    """May ``host`` be touched now? Checked before every host of every batch (and before
    staging). A spent budget marks the host not reached. Returns (admitted, announce):
    ``announce`` is True once per run, for the host that first finds the rollout halted."""
    rec = journal.get('hosts', {}).get(host)
    if rec is None:
        raise TransitionError('%s is not part of rollout %s' % (host, journal.get('id')))
    if rec.get('phase') in TERMINAL:
        return False, False
    spent = check_budget(journal, max_failed)
    if rec.get('resume'):
        # Its restart is under way (stopped, or rolling back): it is finished, whatever the budget.
        return True, False
    if spent:
        record(journal, host, 'not_reached', now, {'message': 'not reached: ' + journal['halt_reason']})
        announce = not journal.get('halt_announced')
        journal['halt_announced'] = True
        return False, announce
    return True, False


VERDICTS = ('halt', 'stage_only', 'preview', 'go')


def admit_verdict(admitted, stage_only=False, check_mode=False, unresolved=None):
    """What the restart entry does with a host after admit, in one answer: ``halt`` (not admitted:
    set aside, finished, or the rollout halted), ``stage_only`` (rollout_stage_only: recorded
    ``stage_only``, left serving), ``preview`` (check mode, and the deployment still has parts
    only staging resolves: recorded ``would_restart``), or ``go``. Returns (verdict, phase to
    record or None, the record's data)."""
    if not admitted:
        return 'halt', None, {}
    if stage_only:
        return 'stage_only', 'stage_only', {}
    if check_mode and unresolved:
        return 'preview', 'would_restart', {'message': 'would restart: ' + ', '.join(str(u) for u in unresolved)}
    return 'go', None, {}


def close_run(journal, now, aborted_reason=None):
    """Close the run: hosts left in a non-terminal phase were stopped by something outside
    the rollout's control (an unreachable host, a playbook stopped early) and are listed as
    such. Returns the journal with its final status."""
    run = current_run(journal)
    journal['counters'] = budget_counters(journal)  # close reads every host once: the counters anew
    if journal.get('max_failed') is not None:
        # Failures of the last batch (or of staging, with no batch left to ask the budget) still
        # spend it: the run halts with the budget's reason rather than "completed with failures".
        check_budget(journal, journal['max_failed'])
    left = []
    for host, rec in sorted(journal.get('hosts', {}).items()):
        phase = rec.get('phase')
        if phase in TERMINAL:
            continue
        if journal.get('halted') and phase in ('pending', 'staged'):
            record(journal, host, 'not_reached', now, {'message': 'not reached: ' + journal['halt_reason']})
            continue
        left.append('%s (%s)' % (host, phase))
        _event(rec, run, 'aborted', now, 'the run ended while this host was %s' % phase)
        rec['message'] = 'the run ended while this host was %s' % phase
    if aborted_reason or left:
        journal['status'] = 'aborted'
        journal['abort_reason'] = '; '.join(filter(None, [aborted_reason, left and 'hosts left mid-way: '
                                                          + ', '.join(left) or None]))
    elif journal.get('halted'):
        journal['status'] = 'halted'
    elif failed_hosts(journal):
        journal['status'] = 'completed with failures'
    else:
        journal['status'] = 'completed'
    journal['finished'] = now
    journal['failed_hosts'] = failed_hosts(journal)
    journal['runs'][-1]['finished'] = now
    return journal


def host_view(rec):
    """The report's view of one host: phase, what it serves, and totals over every run of
    this rollout (restarts, rollbacks, unavailability)."""
    phase = rec.get('phase')
    failed, words = TERMINAL.get(phase, (False, 'left mid-way (%s)' % phase))
    restarts = rec.get('restarts', [])
    down = [r['unavailable_s'] for r in restarts if r.get('unavailable_s') is not None]
    if phase in ('done', 'undrain_failed', 'serving_new'):
        serving = rec.get('after')
    elif phase in ('rollback_failed', 'removed'):
        serving = {}
    else:
        serving = rec.get('before') or (rec.get('after') if phase in ('unchanged', 'would_restart') else None)
    return {
        'phase': phase, 'failed': failed, 'state': words,
        'restarts': len([r for r in restarts if r.get('kind') == 'restart']),
        'rolled_back': any(r.get('rolled_back') for r in restarts),
        'unavailable_s': round(sum(down), 1) if down else None,
        'not_back': phase in ('rollback_failed', 'removed', 'interrupted'),
        'serving': serving or {},
        'target': rec.get('target') or {},
        'message': rec.get('message', ''),
        'remedy': rec.get('remedy', ''),
    }


def _replica_note(journal, host):
    name = (journal.get('replicas') or {}).get(host)
    return ' (replica %s)' % name if name else ''


def _short_image(serving):
    image = serving.get('image') or ''
    digest = serving.get('image_digest') or ''
    if '@' in image:
        return image.split('@', 1)[1][:19]
    return (digest[:19] if digest else image) or '-'


def summary_lines(journal):
    """One line per host for the end of the run, then the halt or abort reason once."""
    lines = ['Rollout %s: %s%s' % (journal.get('id'), journal.get('status'),
                                   ' (check mode: a preview, nothing was changed)' if journal.get('check_mode') else '')]
    for host, rec in sorted(journal.get('hosts', {}).items()):
        view = host_view(rec)
        s = view['serving']
        line = '%s%s: %s; variant=%s image=%s revision=%s' % (
            host, _replica_note(journal, host), view['state'], s.get('variant') or '-', _short_image(s), (s.get('revision') or '-')[:12])
        if view['restarts']:
            line += ' restarts=%d' % view['restarts']
        if view['unavailable_s'] is not None:
            line += ' unavailable=%ss' % view['unavailable_s']
        if view['message'] and (view['failed'] or view['phase'] == 'would_restart'):
            line += ' -- ' + view['message']
        if view['remedy']:
            line += ' Remedy: ' + view['remedy']
        lines.append(line)
    if journal.get('halted'):
        lines.append('Halted: %s. Hosts not reached keep serving their current version.' % journal['halt_reason'])
    if journal.get('abort_reason'):
        lines.append('Aborted: %s.' % journal['abort_reason'])
    return lines


def _cell(value):
    return ' '.join(str(value if value is not None else '-').replace('|', '/').split()) or '-'


def _end(restart):
    """When an outage ended: its ready, else the end a later run inferred for an interrupted one, else None."""
    return restart.get('t_ready') if restart.get('t_ready') is not None else restart.get('t_end')


def render_markdown(journal, width=60):
    """The Markdown report: status, per-host table (totals over every run of this rollout),
    events, and a text chart of each host's unavailability."""
    out = ['# Rollout %s: %s' % (journal.get('id'), journal.get('status')), '']
    if journal.get('check_mode'):
        out += ['**Preview (check mode): nothing was changed.**', '']
    runs = journal.get('runs', [])
    out.append('- Started: %s' % journal.get('started'))
    if len(runs) > 1:
        out.append('- Resumed: %s' % ', '.join(r['started'] for r in runs[1:]))
    out.append('- Finished: %s' % journal.get('finished', ''))
    out.append('- Deployment fingerprint: `%s`' % journal.get('fingerprint', ''))
    if journal.get('halted'):
        out.append('- **Halted:** %s' % journal['halt_reason'])
    if journal.get('abort_reason'):
        out.append('- **Aborted:** %s' % journal['abort_reason'])
    for notice in journal.get('notices', []):
        out.append('- Note: %s' % notice)
    out += ['', '| host | state | variant | image | revision | restarts | rolled back | unavailable (s) | message |',
            '| --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for host, rec in sorted(journal.get('hosts', {}).items()):
        v = host_view(rec)
        s = v['serving']
        msg = v['message'] + ((' Remedy: ' + v['remedy']) if v['remedy'] else '')
        out.append('| %s |' % ' | '.join(_cell(x) for x in (
            host + _replica_note(journal, host), v['state'], s.get('variant'), _short_image(s), (s.get('revision') or '-')[:12], v['restarts'],
            'yes' if v['rolled_back'] else 'no', v['unavailable_s'], msg)))
    out += render_analysis(journal)
    out += ['', '## Unavailability timeline', '',
            'Seconds from the first stop of this rollout; each bar is one host out of service (from the stop of',
            'its old server to its new, or rolled-back, server passing the gates; `x`: not back; `~`: left open',
            'by a killed run, counted until a later run stopped the host again or found it serving).', '']
    bars = []
    for host, rec in sorted(journal.get('hosts', {}).items()):
        for r in rec.get('restarts', []):
            if r.get('t_stop') is not None:
                bars.append((float(r['t_stop']), host, r))
    if not bars:
        out.append('No host was stopped.')
    else:
        bars.sort(key=lambda b: b[0])
        t0 = bars[0][0]
        ends = [float(_end(r)) for _t, _h, r in bars if _end(r) is not None] + [b[0] for b in bars]
        span = max(max(ends) - t0, 1.0)
        out += ['| host | run | down at (s) | up at (s) | unavailable (s) |', '| --- | --- | --- | --- | --- |']
        for t, host, r in bars:
            up = ('%.1f' % (float(r['t_ready']) - t0)) if r.get('t_ready') is not None else (
                '%.1f (interrupted: %s)' % (float(r['t_end']) - t0, r.get('ended', '?')) if r.get('t_end') is not None
                else 'not back')
            cells = (host, r.get('run', 1), t - t0, up, _cell(r.get('unavailable_s')))
            out.append('| %s | %s | %.1f | %s | %s |' % cells)
        out += ['', 'The axis spans %.1f s.' % span, '', '```text']
        for t, host, r in bars:
            a = min(int((t - t0) / span * width), width - 1)
            end = float(_end(r)) if _end(r) is not None else t0 + span
            b = min(max(int(-(-(end - t0) / span * width // 1)), a + 1), width)
            mark = '#' if r.get('t_ready') is not None else ('~' if r.get('t_end') is not None else 'x')
            out.append('%-24s |%s%s%s|' % (host, ' ' * a, mark * (b - a), ' ' * (width - b)))
        out.append('```')
        out += ['', '```mermaid', 'gantt', '    title Unavailability per host', '    dateFormat X', '    axisFormat %s']
        for t, host, r in bars:
            failed = r.get('rolled_back') or r.get('not_back') or r.get('interrupted')
            if _end(r) is not None:
                label = 'down %s s%s :%s, %d, %d' % (
                    r.get('unavailable_s'), ' (failed)' if failed else '', 'crit' if failed else 'active', int(t),
                    int(float(_end(r))))
            else:
                label = 'down - not back (failed) :crit, %d, %d' % (int(t), int(t0 + span))
            out += ['    section %s' % host, '    ' + label]
        out.append('```')
    out += ['', '## Events', '']
    for host, rec in sorted(journal.get('hosts', {}).items()):
        steps = ['%s %s%s' % (e.get('t', ''), e.get('phase'), (': ' + e['message']) if e.get('message') else '')
                 for e in rec.get('events', [])]
        runs = ', '.join(sorted(set(str(e.get('run')) for e in rec.get('events', [])))) or '-'
        out.append('- **%s** (run %s): %s' % (host, runs, '; '.join(steps) or '-'))
    return '\n'.join(out) + '\n'


def _pct(value):
    return '-' if value is None else '%+.0f %%' % (float(value) * 100)


def render_analysis(journal):
    """The report's canary analysis: per analysed host its verdict, baseline, agreement and load
    (old against new), and each prompt's pass or fail with what was expected and what came back."""
    hosts = [(h, rec['analysis']) for h, rec in sorted(journal.get('hosts', {}).items()) if rec.get('analysis')]
    if not hosts:
        return []
    out = ['', '## Canary analysis', '',
           'Each analysed host: the golden set asked with greedy decoding after its gate, each answer checked by its',
           'rule and the garbage detectors, compared with the old version\'s answers; on a canary also a short load,',
           'old against new.', '',
           '| host | role | verdict | prompts right | agreement (required) | baseline | TTFT p50 old -> new (s) | '
           'tokens/s old -> new |', '| --- | --- | --- | --- | --- | --- | --- | --- |']
    for host, an in hosts:
        perf, old = an.get('perf') or {}, an.get('perf_old') or {}
        ttft = '%s -> %s (%s)' % (old.get('ttft_p50_s', '-'), perf.get('ttft_p50_s', '-'), _pct(an.get('ttft_change'))) \
            if perf else '-'
        tps = '%s -> %s (%s)' % (old.get('output_tokens_per_s', '-'), perf.get('output_tokens_per_s', '-'),
                                 _pct(an.get('tokens_per_s_change'))) if perf else '-'
        agree = '-' if an.get('agreement') is None else '%.0f %% of %d (%.0f %%)' % (
            an['agreement'] * 100, an.get('compared', 0), float(an.get('min_agreement', 0)) * 100)
        role = 'canary' if journal['hosts'][host].get('canary') else 'later host'
        out.append('| %s |' % ' | '.join(_cell(x) for x in (
            host, role, 'passed' if an.get('passed') else 'FAILED', '%s of %s' % (an.get('rule_passed'), an.get('asked')),
            agree, an.get('baseline_source'), ttft, tps)))
    for host, an in hosts:
        out += ['', '### %s: %s' % (host, 'passed' if an.get('passed') else 'FAILED'), '']
        for failure in an.get('failures') or []:
            out.append('- **%s**' % _cell(failure))
        out += ['', '| prompt | input | result | expected | got | same as old |', '| --- | --- | --- | --- | --- | --- |']
        for p in an.get('prompts') or []:
            why = '; '.join((p.get('failures') or []) + (p.get('symptoms') or []))
            same = {True: 'yes', False: 'no'}.get(p.get('matches_old'), '-')
            out.append('| %s |' % ' | '.join(_cell(x) for x in (
                p.get('id'), p.get('modality'), 'pass' if p.get('passed') else 'FAIL: ' + why, p.get('expected'),
                p.get('got'), same)))
    return out


def _digest_of(state):
    image = (state or {}).get('image') or ''
    return (state or {}).get('image_digest') or (image.split('@', 1)[1] if '@' in image else image)


def restart_reasons(before, after, active, unit_changed):
    """Why a host restarts, in words (empty: it does not). ``before``: what the host recorded
    after its last passed gate (rollout_state_file; empty on a first deployment); ``after``: its
    target, with the checksum of the unit now on disk; ``unit_changed``: the service role just
    wrote (or, in check mode, would write) a different unit."""
    before = before or {}
    reasons = []
    if not active:
        reasons.append('the service is not active' + ('' if before else ' (first deployment on this host)'))
    named = []
    if before.get('variant') and before.get('variant') != after.get('variant'):
        named.append('variant %s -> %s' % (before.get('variant'), after.get('variant')))
    if before and _digest_of(before) != _digest_of(after):
        named.append('image %s -> %s' % (_digest_of(before)[:19] or '-', _digest_of(after)[:19] or '-'))
    if before.get('revision') and before.get('revision') != after.get('revision'):
        named.append('model revision %s -> %s' % (before['revision'][:12], (after.get('revision') or '-')[:12]))
    unit_differs = unit_changed or (before.get('unit_checksum') or '') != (after.get('unit_checksum') or '')
    if named:
        reasons.extend(named)
    elif unit_differs and active:
        reasons.append('the unit changed (arguments, environment or mounts)')
    elif unit_differs and not reasons:
        reasons.append('the unit changed')
    return reasons


# What the restart compares: the contract's keys that the state file records, in this order.
TARGET_KEYS = ('variant', 'image', 'image_digest', 'revision', 'served_model_name')


def restart_record(deployment, serving, unit_state=None, unit_args=None, unit_changed=False, resume=''):
    """The restart of one host as one record, built once, from one read of its state file.

    ``deployment``: the host's contract (rollout_deployment); ``serving``: its state file as read
    (``{}`` when there is none); ``unit_state``: rollout_unit_state's result for the unit now on disk
    (None before the unit is written: the record then has ``before`` and ``recorded_analysis`` only);
    ``unit_args``: the unit's vLLM arguments; ``unit_changed``: the service role wrote another unit;
    ``resume``: the journal's resume step for the host ('' for none).

    Returns ``before`` (what it serves, without the analysis), ``recorded_analysis`` (the old
    version's last passed canary analysis), and with ``unit_state``: ``after`` (the target as the
    state file will record it), ``active``, ``reasons`` (restart_reasons; empty: no restart),
    ``replica`` (its place in a multi-node replica, {} when it serves alone), ``replica_worker``,
    ``unit_kept`` (a replica member restarted only because a partner must: a rollback keeps its
    unit) and ``resume`` (a replica restarts afresh, in lockstep: never resumed)."""
    serving = dict(serving or {})
    record = {'recorded_analysis': serving.pop('analysis', None) or {}, 'before': serving}
    if unit_state is None:
        return record
    deployment = deployment or {}
    entry = deployment.get('entry') or {}
    replica = entry.get('replica') or {}
    checksum = unit_state.get('unit_checksum')
    active = bool(unit_state.get('active'))
    after = dict((key, deployment.get(key)) for key in TARGET_KEYS)
    after.update(unit_checksum=checksum, args=list(unit_args or []))
    record.update(
        after=after, active=active,
        reasons=restart_reasons(serving, dict(deployment, unit_checksum=checksum), active, bool(unit_changed)),
        replica=replica, replica_worker=replica.get('role') == 'worker',
        unit_kept='replica' in entry and not unit_changed,
        resume='' if replica else (resume or ''))
    return record
