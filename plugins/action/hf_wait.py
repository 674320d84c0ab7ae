# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.hf_wait: follow a background staging job, one progress line per round.

The loop and its decisions are ``follow`` and friends in ``plugins/module_utils/hf_wait.py``
(unit-tested with a fake clock); this file only supplies the real poll (one shell command on the
host that prints the job's progress file and Ansible's async status file), sleep, clock and display.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import shlex
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.utils.display import Display
from ansible_collections.inkling.fleet.plugins.module_utils import hf_wait
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

display = Display()

ARGUMENT_SPEC = dict(
    job=dict(type='dict', required=True),
    progress_file=dict(type='str', required=True),
    interval_s=dict(type='float', default=30),
    timeout_s=dict(type='int', default=172800),
    stall_timeout_s=dict(type='int', default=300),
    poll_s=dict(type='float', default=5.0),
    label=dict(type='str', default='the background job'),
    fail_on_job_failure=dict(type='bool', default=True),
    unreachable_s=dict(type='int', default=60),
)

SEP = '@@inkling-hf-wait@@'
MISSING = '@@inkling-hf-wait-missing@@'


def read_files_command(paths):
    """A POSIX shell command printing each file followed by SEP (MISSING for a file that does not exist)."""
    parts = []
    for path in paths:
        q = shlex.quote(path)
        parts.append("if [ -e %s ]; then cat %s 2>/dev/null; else printf '%%s' '%s'; fi; printf '\\n%s\\n'"
                     % (q, q, MISSING, SEP))
    return '; '.join(parts)


def split_files(stdout, count):
    """The contents printed by read_files_command, None for a missing file. Over SSH with become the command
    runs on a terminal (ssh -tt, for sudo), which turns every newline into CR LF."""
    chunks = stdout.replace('\r\n', '\n').split('\n%s\n' % SEP)[:count]
    chunks += [''] * (count - len(chunks))
    return [None if c.strip() == MISSING else c for c in chunks]


class ActionModule(InklingAction):
    _requires_connection = True
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def _results_file(self, job):
        if job.get('results_file'):
            return job['results_file']
        async_dir = self._remote_expand_user(self.get_shell_option('async_dir', default='~/.ansible_async'))
        return self._connection._shell.join_path(async_dir, job['ansible_job_id'])

    def run_action(self, result, args, task_vars):
        job = args['job']
        if not job.get('ansible_job_id'):
            result.update(failed=True, msg='job must be the registered result of an async task with poll: 0 '
                                           '(it has no ansible_job_id): %s' % sorted(job))
            return result
        if args['interval_s'] < 0 or args['timeout_s'] < 0 or args['poll_s'] <= 0:
            result.update(failed=True, msg='interval_s and timeout_s must be >= 0 and poll_s > 0, got %s, %s, %s'
                          % (args['interval_s'], args['timeout_s'], args['poll_s']))
            return result
        host = task_vars.get('inventory_hostname', 'this host')
        command = read_files_command([args['progress_file'], self._results_file(job)])

        lost = {}

        def poll():
            res = self._low_level_execute_command(command, sudoable=True)
            if res.get('rc') not in (0, None) and SEP not in (res.get('stdout') or ''):
                # the command cannot fail on a host that answers: the host is gone (it died, its container was
                # killed); after unreachable_s the host is marked unreachable and the play goes on without it
                since = lost.setdefault('since', time.monotonic())
                if time.monotonic() - since >= args['unreachable_s']:
                    raise AnsibleConnectionFailure('%s: lost while following %s: no answer for %d s (%s)' % (
                        host, args['label'], time.monotonic() - since, (res.get('stderr') or '').strip()[-300:]))
                return None, {'finished': False}        # not known yet: the wait goes on
            lost.pop('since', None)
            progress_text, status_text = split_files(res.get('stdout') or '', 2)
            try:
                progress = json.loads(progress_text) if progress_text else None
            except ValueError:
                progress = None         # a file being replaced; the next poll reads it
            return progress if isinstance(progress, dict) else None, hf_wait.job_status(status_text)

        outcome = hf_wait.follow(poll, time.sleep, time.monotonic, args['interval_s'], args['timeout_s'],
                                 show=display.display, host=host, stall_timeout_s=args['stall_timeout_s'],
                                 poll_s=args['poll_s'], label=args['label'])
        error = outcome.pop('error')
        result.update(outcome)
        result['changed'] = False
        if error:
            result.update(failed=True, msg=error)
        elif args['fail_on_job_failure'] and hf_wait.job_failed(outcome['job']):
            result.update(failed=True, msg=hf_wait.job_failure_message(outcome['job'], host, args['label'],
                                                                       outcome['msg']))
        return result
