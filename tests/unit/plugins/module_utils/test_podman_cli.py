# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""podman_cli: the bounded run and the classified retry loop image_pull and registry_login share."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys

from ansible_collections.inkling.fleet.plugins.module_utils import podman_cli as pc

TRANSIENT = 'Error: initializing source docker://r/x: pinging container registry r: Get "https://r/v2/": dial tcp: i/o timeout'
DENIED = 'Error: initializing source docker://r/x: reading manifest: unauthorized: authentication required'


def answers(*rcs_texts):
    calls = []
    queue = list(rcs_texts)

    def attempt():
        calls.append(1)
        return queue.pop(0)
    return attempt, calls


def test_success_at_once_sleeps_never():
    slept = []
    attempt, calls = answers((0, ''))
    assert pc.with_retries(attempt, 3, 30, sleep=slept.append) == ([], None)
    assert (len(calls), slept) == (1, [])


def test_a_transient_error_is_retried_until_success():
    slept = []
    attempt, calls = answers((125, TRANSIENT), (125, TRANSIENT), (0, ''))
    attempts, found = pc.with_retries(attempt, 3, 7, sleep=slept.append)
    assert found is None and len(calls) == 3 and slept == [7, 7]
    assert [a['attempt'] for a in attempts] == [1, 2]
    assert attempts[0]['kind'] != 'auth'


def test_retries_end_after_retries_plus_one_attempts():
    slept = []
    attempt, calls = answers(*[(125, TRANSIENT)] * 5)
    attempts, found = pc.with_retries(attempt, 2, 1, sleep=slept.append)
    assert len(calls) == 3 and len(attempts) == 3 and slept == [1, 1]
    assert found['retry'] is True


def test_an_error_not_worth_retrying_stops_at_once():
    slept = []
    attempt, calls = answers((125, DENIED), (0, ''))
    attempts, found = pc.with_retries(attempt, 3, 1, sleep=slept.append)
    assert len(calls) == 1 and slept == [] and found['kind'] == 'auth' and not found['retry']


def test_run_bounded_reports_a_timeout_as_podman_would(tmp_path):
    rc, text = pc.run_bounded([sys.executable, '-c', 'import time; time.sleep(5)'], 0.2, 'pull')
    assert rc == -1 and 'the pull did not finish within 0 s (timed out)' in text
    rc, text = pc.run_bounded([sys.executable, '-c', 'import sys, os; sys.stderr.write(os.environ["LC_ALL"] + sys.stdin.read())'],
                              5, 'login', stdin=b'!')
    assert (rc, text) == (0, 'C!')
