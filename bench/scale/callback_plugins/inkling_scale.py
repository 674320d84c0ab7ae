# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Bench only: per-task, per-host timings and the journal's time per call, for bench/rollout_scale.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
name: inkling_scale
type: aggregate
short_description: Bench only - task results and durations per host, and the journal's time per call
description:
  - Used by bench/rollout_scale.py, never by a fleet. Records every task result (task, action, host, status and
    the time from the task's start for that host to its result) and, at the end, the play recap per host, as
    JSON in the file named by E(INKLING_SCALE_TIMINGS).
  - With E(INKLING_SCALE_JOURNAL_LOG) set, it also times each call of the inkling.fleet.rollout_journal action
    plugin in the worker that runs it, the whole call (lock wait included) and the time it holds the journal's
    lock (from reading the journal to the end of its decision and write). It wraps the plugin's own functions in
    this process before any worker is forked, and the plugin runs unchanged. One line per call (action, phase,
    host, seconds of the call, seconds under the lock, journal bytes, CPU seconds under the lock).
author: inkling.fleet contributors
requirements:
  - enabled in callbacks_enabled (ANSIBLE_CALLBACKS_ENABLED=inkling_scale)
'''

import json
import os
import time

from ansible.plugins.callback import CallbackBase

JOURNAL_ACTIONS = ('open', 'record', 'admit', 'close', 'read')


def _append(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode('utf-8'))
    finally:
        os.close(fd)


def wrap_journal(log_path):
    """Time rollout_journal's calls in the workers. True when the plugin could be wrapped."""
    try:
        from ansible_collections.inkling.fleet.plugins.action import rollout_journal as plugin  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    if getattr(plugin, '_inkling_scale_wrapped', False):
        return True
    call = {}
    # _read: the whole-file journal (before the SQLite store); the store's calls are timed from their
    # _do_<action>, which runs under the lock.
    read, run = getattr(plugin, '_read', None), plugin.ActionModule.run

    def timed_read(path):
        call['locked'] = time.perf_counter()   # the first thing done under the lock
        call['locked_cpu'] = time.process_time()
        return read(path)

    def timed_run(self, tmp=None, task_vars=None):
        call.clear()
        start = time.perf_counter()
        try:
            return run(self, tmp, task_vars)
        finally:
            end = time.perf_counter()
            args = self._task.args
            host = (task_vars or {}).get('inventory_hostname', '?')
            base = str(args.get('report_dir', ''))
            path = os.path.join(base, 'journal.db')
            path = path if os.path.exists(path) else os.path.join(base, 'journal.json')
            size = os.path.getsize(path) if os.path.exists(path) else 0
            _append(log_path, '%s\t%s\t%s\t%.6f\t%.6f\t%d\t%.6f\n' % (
                args.get('action'), args.get('phase') or '-', host, end - start,
                call.get('done', end) - call.get('locked', start), size,
                call.get('done_cpu', 0.0) - call.get('locked_cpu', 0.0)))

    def timed(name):
        method = getattr(plugin.ActionModule, name)

        def wrapper(self, *args, **kwargs):
            if 'locked' not in call:
                call['locked'] = time.perf_counter()
                call['locked_cpu'] = time.process_time()
            try:
                return method(self, *args, **kwargs)
            finally:
                call['done'] = time.perf_counter()
                call['done_cpu'] = time.process_time()
        return wrapper

    if read is not None:
        plugin._read = timed_read
    plugin.ActionModule.run = timed_run
    for action in JOURNAL_ACTIONS:
        setattr(plugin.ActionModule, '_do_' + action, timed('_do_' + action))
    plugin._inkling_scale_wrapped = True
    return True


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'inkling_scale'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._out = os.environ.get('INKLING_SCALE_TIMINGS')
        self._starts = {}
        self._results = []
        self._includes = 0
        log = os.environ.get('INKLING_SCALE_JOURNAL_LOG')
        self._journal_wrapped = wrap_journal(log) if log else False

    def v2_runner_on_start(self, host, task):
        self._starts[(task._uuid, host.name)] = time.time()

    def _done(self, result, status):
        task = result._task
        host = result._host.name
        start = self._starts.pop((task._uuid, host), None)
        if status == 'ok' and result._result.get('changed'):
            status = 'changed'
        self._results.append([task.get_name(), task.action, host, status,
                              round(time.time() - start, 6) if start else None])

    def v2_runner_on_ok(self, result):
        self._done(result, 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._done(result, 'ignored' if ignore_errors else 'failed')

    def v2_runner_on_skipped(self, result):
        self._done(result, 'skipped')

    def v2_runner_on_unreachable(self, result):
        self._done(result, 'unreachable')

    def v2_playbook_on_include(self, included_file):
        self._includes += len(included_file._hosts)

    def v2_playbook_on_stats(self, stats):
        if not self._out:
            return
        recap = dict((host, stats.summarize(host)) for host in sorted(stats.processed))
        with open(self._out, 'w') as handle:
            json.dump({'results': self._results, 'includes': self._includes, 'recap': recap,
                       'journal_wrapped': self._journal_wrapped}, handle)
