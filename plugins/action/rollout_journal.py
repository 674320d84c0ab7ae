# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.rollout_journal: the rollout's journal on the controller.

Runs entirely on the controller (whatever host the task is for). Applies one decision of
``plugins/module_utils/rollout.py`` to the journal kept by ``plugins/module_utils/rollout_store.py``
(``<report_dir>/journal.db``), under an exclusive lock, because the hosts of a batch call it at the
same time from Ansible's worker processes. ``record``, ``step`` and ``admit`` read and write only
the run-level fields and the host's own records (and its replica's): their cost does not grow with
the fleet. ``open`` and ``close`` read and write the whole journal once, and write ``journal.json``,
a full snapshot of it, and at close the reports; ``read`` returns the live journal.

Test hook (never set it in production): with ``INKLING_FLEET_TEST_KILL_AFTER=HOST:NAME`` in the
controller's environment, the call that has just made durable (committed) the phase or step NAME
of HOST kills its ansible-playbook with SIGKILL, as a lost controller would be, right there: the
kill points of the resume tests (molecule/default/cases/killed.yml) are exact, not timed.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import fcntl
import json
import os
import signal
import socket
import tempfile
import time

from ansible_collections.inkling.fleet.plugins.module_utils import rollout as engine
from ansible_collections.inkling.fleet.plugins.module_utils import rollout_store as store_mod
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction
from ansible_collections.inkling.fleet.plugins.plugin_utils.controller_files import NotADirectory, make_private_dirs

ARGUMENT_SPEC = dict(
    action=dict(type='str', required=True, choices=['open', 'record', 'step', 'admit', 'close', 'read']),
    report_dir=dict(type='path', required=True),
    host=dict(type='str'),
    hosts=dict(type='list', elements='str', default=[]),
    contract_var=dict(type='str', default='rollout_deployment'),
    failure_var=dict(type='str', default='rollout_preflight_failure'),
    current_var=dict(type='str', default='rollout_serving'),
    min_healthy=dict(type='int', default=1),
    max_failed=dict(type='int', default=0),
    phase=dict(type='str'),
    step=dict(type='str'),
    data=dict(type='dict', default={}),
    aborted_reason=dict(type='str'),
    stage_only=dict(type='bool', default=False),
    unresolved=dict(type='list', elements='str', default=[]),
)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _write(path, text):
    """Write a journal or report file: a new file of mode 0600 (mkstemp), renamed over ``path`` (which
    replaces a link there, never its target)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.tmp-')
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.rename(tmp, path)


def _make_dir(path):
    """The report directory: created 0700 (reports name hosts, images and failures), with its parents,
    also when another host's fork makes it at the same moment; one that exists keeps its mode. A file
    there is refused."""
    try:
        make_private_dirs(path, 0o700, set_mode=False)
    except NotADirectory as exc:
        raise JournalError(str(exc))


def _start_ticks(pid):
    """The start time of process ``pid`` in clock ticks since boot (/proc/PID/stat field 22), or
    None: with the pid, it tells a process from a later one that reuses its pid. A zombie (a killed
    process not yet reaped) has no start time here: it runs nothing any more."""
    try:
        with open('/proc/%d/stat' % int(pid)) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return None if fields[0] in ('Z', 'X') else int(fields[19])
    except (IOError, OSError, ValueError, IndexError, TypeError):
        return None


def _controller():
    """This run's ansible-playbook (the parent of the worker process running this task)."""
    pid = os.getppid()
    return {'host': socket.gethostname(), 'pid': pid, 'pid_start': _start_ticks(pid)}


def _alive(pid, pid_start):
    return pid_start is not None and _start_ticks(pid) == pid_start


def _test_kill_point(host, name):
    """The test hook of the module docstring: SIGKILL this run's ansible-playbook, then this worker."""
    if os.environ.get('INKLING_FLEET_TEST_KILL_AFTER') == '%s:%s' % (host, name):
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


class JournalError(Exception):
    pass


def _refusal(e):
    """The task's message for a journal this code does not work on, or a store it cannot use."""
    if not e.refused:
        return ('rollout journal: cannot use %s: %s. Nothing was changed. Remedy: check the report directory (a link '
                'or a special file there is refused; another process may hold the journal) and run again' % (e.path, e.why))
    if e.path.endswith('.json'):
        return ('%s is not a rollout journal (a JSON object): %s. It was left untouched. Remedy: move it aside '
                '(it may hold the records of an interrupted rollout) and run again to start a new rollout.'
                % (e.path, e.why))
    return ('%s is not a rollout journal this code works on: %s. It was left untouched. Remedy: move it aside with '
            'the files next to it (%s-journal and %s: they may hold the records of an interrupted rollout, see '
            '`python -m ansible_collections.inkling.fleet.plugins.module_utils.rollout_store dump %s`) and run again '
            'to start a new rollout.' % (e.path, e.why, store_mod.DB_NAME, store_mod.SNAPSHOT_NAME,
                                         os.path.dirname(e.path)))


class ActionModule(InklingAction):
    _requires_connection = False
    _supports_check_mode = True
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_action(self, result, args, task_vars):
        check_mode = bool(self._task.check_mode)
        base = args['report_dir']
        directory = os.path.join(base, 'preview') if check_mode else base
        host = args['host'] or task_vars.get('inventory_hostname')
        try:
            _make_dir(base)
            _make_dir(directory)
            # O_NOFOLLOW and no truncation: a link planted as the lock file is refused, never written.
            lock = os.open(os.path.join(directory, '.journal.lock'),
                           os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0), 0o600)
        except (JournalError, OSError) as e:
            result.update(failed=True, msg='rollout journal: cannot use the report directory %s: %s. Remedy: set '
                          'rollout_report_dir to a directory of the controller user (not a link)' % (directory, e))
            return result
        store = None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                store = store_mod.Store(directory)
                out = getattr(self, '_do_' + args['action'])(store, args, host, task_vars, check_mode)
            except store_mod.StoreError as e:
                result.update(failed=True, msg=_refusal(e))
                return result
            except engine.TransitionError as e:
                result.update(failed=True, msg='rollout journal: %s' % e)
                return result
        finally:
            if store is not None:
                store.close()   # rolls back what a failed call left uncommitted
            os.close(lock)
        result.update(out)
        result['changed'] = False
        result['journal_path'] = os.path.join(directory, store_mod.DB_NAME)
        return result

    # -- the journal -------------------------------------------------------------------------

    @staticmethod
    def _view(store, host):
        """The run-level fields and ``host``'s records (and its replica's), in a writer's transaction."""
        view = None
        if store.exists:
            store.begin()
            view = store.load_view(host)
        if view is None:
            raise engine.TransitionError('no journal at %s: the rollout was not opened' % store.path)
        return store_mod.check(view, store.path)

    @staticmethod
    def _whole(store):
        """The whole live journal (the store's, or a journal.json to import), in a writer's transaction."""
        if store.exists:
            store.begin()
        return store_mod.live_journal(store)

    @staticmethod
    def _save_whole(store, journal):
        """Write the whole journal in one transaction, then its snapshot journal.json."""
        if not store.exists:
            store.create()
            store.begin()
        store.replace(journal)
        store.commit()
        _write(os.path.join(store.directory, store_mod.SNAPSHOT_NAME), store_mod.compact(engine.published(journal)) + '\n')

    # -- actions -----------------------------------------------------------------------------

    def _do_open(self, store, args, host, task_vars, check_mode):
        hostvars = task_vars.get('hostvars', {})
        outcomes = {}
        for name in args['hosts']:
            hv = hostvars[name] if name in hostvars else {}
            contract = hv.get(args['contract_var']) if hasattr(hv, 'get') else None
            failure = hv.get(args['failure_var']) if hasattr(hv, 'get') else None
            current = hv.get(args['current_var']) if hasattr(hv, 'get') else None
            if failure:
                outcomes[name] = {'failed': str(failure.get('message', failure) if isinstance(failure, dict)
                                                else failure),
                                  'failures': failure.get('failures', []) if isinstance(failure, dict) else []}
            elif contract:
                outcomes[name] = {'contract': dict(contract)}
            else:
                outcomes[name] = {}
            if current:
                outcomes[name]['current'] = dict(current)
            # The inventory's replica (docs/variants.md), so that a member without a contract still
            # counts with its replica.
            replica = hv.get('inkling_replica') if hasattr(hv, 'get') else None
            if replica:
                outcomes[name]['replica'] = str(replica)
        journal = self._whole(store)
        directory = store.directory
        me = _controller()
        other = engine.concurrent_controller(journal, me, _alive)
        if other:
            raise engine.TransitionError(
                'rollout %s is still running from this controller (ansible-playbook pid %s, journal %s): two '
                'rollouts in one report directory would mix their records. Nothing was changed. Remedy: wait for '
                'it to end; or stop it (kill %s) and run again, which resumes it; or give this run another '
                'rollout_report_dir' % (journal.get('id'), other.get('pid'), store.path, other.get('pid')))
        run_id = datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')
        suffix = 1
        while os.path.exists(os.path.join(directory, 'rollout-%s.json' % run_id)) or \
                (journal and journal.get('id') == run_id):
            suffix += 1
            run_id = '%s-%d' % (run_id.split('-')[0], suffix)
        new, abandoned, notice = engine.open_run(journal, outcomes, run_id, _now(), check_mode=check_mode,
                                                 min_healthy=args['min_healthy'], max_failed=args['max_failed'],
                                                 controller=me)
        if abandoned:
            self._write_reports(abandoned, directory)
        self._save_whole(store, new)
        return {'id': new['id'], 'resumed': len(new['runs']) > 1, 'abandoned': abandoned['id'] if abandoned else None,
                'msg': notice + ' (journal %s)' % store.path, 'halted': new['halted'], 'halt_reason': new['halt_reason']}

    def _do_record(self, store, args, host, task_vars, check_mode):
        view = self._view(store, host)
        data = dict(args['data'])
        if args['phase'] == 'restarting':
            data.setdefault('t_stop', time.time())
        if args['phase'] in ('serving_new', 'rolled_back', 'rollback_undrain_failed'):
            data.setdefault('t_ready', time.time())
        if args['phase'] == 'unchanged':
            data.setdefault('t_seen', time.time())   # ends an outage a killed run left open
        rec = engine.record(view, host, args['phase'], _now(), data)
        store.save_view(view)
        store.commit()
        _test_kill_point(host, args['phase'])
        return {'phase': rec['phase'], 'msg': '%s: %s' % (host, args['phase']), 'canary': bool(rec.get('canary')),
                'halted': view.get('halted', False)}

    def _do_step(self, store, args, host, task_vars, check_mode):
        view = self._view(store, host)
        engine.record_step(view, host, args['step'], _now(), time.time())
        store.save_view(view)
        store.commit()
        _test_kill_point(host, args['step'])
        return {'step': args['step'], 'msg': '%s: %s' % (host, args['step'])}

    def _do_admit(self, store, args, host, task_vars, check_mode):
        view = self._view(store, host)
        if engine.halt_needed(view, args['max_failed']) and \
                (view['hosts'].get(host) or {}).get('phase') not in engine.TERMINAL:
            store.add_failed(view)      # once per rollout: the halt reason names the failed hosts
        admitted, announce = engine.admit(view, host, args['max_failed'], _now())
        store.save_view(view)
        store.commit()
        rec = view['hosts'][host]
        verdict, phase, data = engine.admit_verdict(admitted, args.get('stage_only'), check_mode, args.get('unresolved'))
        out = {'admitted': admitted, 'announce': announce, 'halted': view.get('halted', False),
               'halt_reason': view.get('halt_reason', ''), 'phase': rec.get('phase'),
               'resume': rec.get('resume', '') if admitted else '', 'canary': bool(rec.get('canary')),
               'verdict': verdict}
        if phase:
            # what the caller would have recorded next, in its own transaction as before
            out['phase'] = self._do_record(store, dict(args, phase=phase, data=data), host, task_vars,
                                           check_mode)['phase']
        return out

    def _do_read(self, store, args, host, task_vars, check_mode):
        store.begin_read()
        journal = store_mod.live_journal(store)
        return {'journal': engine.published(journal) if journal else {}}

    def _do_close(self, store, args, host, task_vars, check_mode):
        journal = None
        if store.exists:
            store.begin()
            journal = store_mod.live_journal(store) if store.has_journal() else None
        if journal is None:
            raise engine.TransitionError('no journal at %s: the rollout was not opened' % store.path)
        if journal.get('status') == 'running':
            engine.close_run(journal, _now(), aborted_reason=args['aborted_reason'])
        self._save_whole(store, journal)
        report = self._write_reports(journal, store.directory)
        return {'status': journal['status'], 'id': journal['id'], 'report': report,
                'report_json': report[:-len('.md')] + '.json',
                'summary': engine.summary_lines(journal), 'failed_hosts': journal.get('failed_hosts', []),
                'rollout_failed': journal['status'] != 'completed', 'halt_reason': journal.get('halt_reason', ''),
                'abort_reason': journal.get('abort_reason', '')}

    @staticmethod
    def _write_reports(journal, directory):
        if not engine.RUN_ID_RE.match(str(journal.get('id'))):
            raise engine.TransitionError('journal id %r is not a run id: no report written' % (journal.get('id'),))
        prefix = 'preview' if journal.get('check_mode') else 'rollout'
        base = os.path.join(directory, '%s-%s' % (prefix, journal['id']))
        _write(base + '.json', json.dumps(engine.published(journal), indent=2, sort_keys=True) + '\n')
        _write(base + '.md', engine.render_markdown(journal))
        return base + '.md'
