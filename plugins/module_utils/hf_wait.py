# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The bounded wait for a background staging job (hf_download, hf_peer_copy), as pure functions.

The action plugin ``inkling.fleet.hf_wait`` supplies the real poll (it reads the job's progress
file and Ansible's async status file on the host), sleep, clock and display; the unit tests
supply fakes. One loop, no recursion: a wait of 48 hours at 30 s is 5,760 rounds of this loop.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc


def job_status(text):
    """What Ansible's async status file says, as ``ansible.builtin.async_status`` reads it.

    ``text`` is the file's content, or None when the file does not exist. Returns None for a
    missing file, else the job's result with ``finished`` (bool): the file holds
    ``{"started": true, "finished": false, ...}`` while the job runs and the module's result
    (no ``started``) once it ended; an empty or half-written file means it still runs.
    """
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return {'finished': False}
    if not isinstance(data, dict):
        return {'finished': False}
    if 'started' not in data:
        data['finished'] = True
    else:
        data['finished'] = bool(data.get('finished'))
    return data


def job_failed(job):
    """A finished job failed (as the role checked it: failed, or a non-zero rc)."""
    return bool(job.get('failed')) or (job.get('rc') or 0) != 0


def job_failure_message(job, host, label, last_line):
    """Why a finished job failed: its own message, or what Ansible's async wrapper means by its own."""
    msg = job.get('msg') or ''
    if msg == 'Timeout exceeded' and 'child_pid' in job:
        return ('%s: %s was stopped by its async time limit (Timeout exceeded); last progress: %s. A new run '
                'resumes; raise the limit for slow links' % (host, label, last_line))
    return msg or '%s: %s failed without a message' % (host, label)


def progress_line(progress, stall_timeout_s=None, progress_file=None):
    """One line for the operator from a progress file's content (None: not written yet)."""
    if not progress:
        return 'waiting for the job to start%s' % ((' (%s)' % progress_file) if progress_file else '')
    msg = hc.progress_message(progress)
    since = progress.get('seconds_since_progress') or 0
    if stall_timeout_s is not None and progress.get('state') == 'running' and since >= stall_timeout_s:
        msg += ' [stalled for %ds]' % since
    return msg


# Near its end (its progress says fewer seconds left than poll_s) a job is polled every ENDGAME_POLL_S instead
# (when poll_s is longer): its end is seen within about a second, not within poll_s, for a few polls more.
ENDGAME_POLL_S = 1.0


def next_delay(now, start, next_line, interval_s, timeout_s, poll_s, eta_s=None):
    """Seconds to sleep before the next poll: at most poll_s (ENDGAME_POLL_S once the job's eta_s is below
    poll_s), and never past the next line or the end."""
    if eta_s is not None and eta_s < poll_s:
        poll_s = min(poll_s, max(ENDGAME_POLL_S, eta_s))
    return max(0.0, min(poll_s, next_line - now, start + timeout_s - now))


def eta(progress):
    """The seconds a running job's progress says are left (None when unknown)."""
    if not progress or progress.get('state') != 'running' or progress.get('eta_s') is None:
        return None
    try:
        return float(progress['eta_s'])
    except (TypeError, ValueError):
        return None


def follow(poll, sleep, clock, interval_s, timeout_s, show=None, host='this host', stall_timeout_s=None,
           poll_s=5.0, label='the job'):
    """Follow a background job until it ends or ``timeout_s`` seconds have passed.

    ``poll()`` returns ``(progress, job)``: the progress file's content (None before the job wrote
    it) and ``job_status()`` of the async status file (None when that file is missing). The job is
    polled every ``poll_s`` seconds (so its end is seen within poll_s), every ENDGAME_POLL_S once its progress
    says fewer seconds are left than poll_s; one line per round, every
    ``interval_s`` seconds, goes to ``show`` as ``HOST: PROGRESS``, and a last one when the job ends.

    Returns ``{'rounds', 'polls', 'waited_s', 'finished', 'timed_out', 'progress', 'job', 'msg',
    'error'}``: ``rounds`` counts the lines shown, ``job`` is the job's result once finished.
    """
    start = clock()
    out = {'rounds': 0, 'polls': 0, 'waited_s': 0, 'finished': False, 'timed_out': False, 'progress': {},
           'job': {}, 'msg': '', 'error': None}
    next_line = start + interval_s

    def line(text):
        out['rounds'] += 1
        out['msg'] = text
        if show:
            show('%s: %s' % (host, text))

    while True:
        progress, job = poll()
        now = clock()
        out['polls'] += 1
        out['waited_s'] = int(round(now - start))
        out['progress'] = progress or {}
        text = progress_line(progress, stall_timeout_s)
        if job is None:
            out['error'] = ('%s: the status file of %s is gone (Ansible\'s async directory was cleaned, or the '
                            'host restarted); the job cannot be followed. Remedy: run the play again (finished '
                            'files are kept, partial ones resume)' % (host, label))
            line(text)
            return out
        if job['finished']:
            out['finished'] = True
            out['job'] = dict((k, v) for k, v in job.items() if k != 'invocation')
            line(text)
            return out
        if now - start >= timeout_s:
            out['timed_out'] = True
            out['error'] = ('%s: %s did not end within %d s; last progress: %s. It keeps running on the host '
                            'until its own limit; a new run resumes what it finished' % (host, label, timeout_s, text))
            line(text + ' [gave up waiting after %ds]' % out['waited_s'])
            return out
        if now >= next_line:
            line(text)
            next_line = next_line + interval_s if next_line + interval_s > now else now + interval_s
        sleep(next_delay(now, start, next_line, interval_s, timeout_s, poll_s, eta(progress)))


# The options of inkling.fleet.hf_progress (its DOCUMENTATION describes them).
PROGRESS_ARGUMENT_SPEC = dict(
    progress_file=dict(type='path', required=True),
    wait_s=dict(type='int', default=30),
    stall_timeout_s=dict(type='int', default=600),
)
