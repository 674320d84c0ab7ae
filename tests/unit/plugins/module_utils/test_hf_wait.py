# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The bounded wait of hf_wait (plugins/module_utils/hf_wait.py) with a fake clock: one line per
interval, the end seen within a poll, the time limit, a missing status file, and a long wait in one loop."""

import json

from ansible_collections.inkling.fleet.plugins.module_utils import hf_wait


class Clock(object):
    def __init__(self):
        self.t = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        assert s >= 0
        self.sleeps.append(s)
        self.t += s


def progress(done, state='running', since=0, total=1000):
    return {'state': state, 'bytes_done': done, 'bytes_total': total, 'rate_bps': 10, 'eta_s': (total - done) // 10,
            'files_done': 0, 'files_total': 2, 'seconds_since_progress': since}


RUNNING = {'started': True, 'finished': False, 'ansible_job_id': 'j1'}


def job_until(clock, end, result=None, prog=None):
    """A poll: the job runs until clock time `end`, then ends with result."""
    def poll():
        if clock() >= end:
            return progress(1000, 'done'), dict(result or {'changed': True}, finished=True)
        return (prog or progress)(int(clock() - 1000)), dict(RUNNING)
    return poll


def test_job_status_reads_the_async_file_as_async_status_does():
    assert hf_wait.job_status(None) is None
    assert hf_wait.job_status('') == {'finished': False}
    assert hf_wait.job_status('{"started": true, "fin') == {'finished': False}
    assert hf_wait.job_status(json.dumps({'started': 1, 'finished': 0, 'ansible_job_id': 'x'}))['finished'] is False
    done = hf_wait.job_status(json.dumps({'changed': True, 'holder': True}))
    assert done == {'changed': True, 'holder': True, 'finished': True}
    timed_out = hf_wait.job_status(json.dumps({'failed': 1, 'msg': 'Timeout exceeded', 'child_pid': 3}))
    assert timed_out['finished'] and hf_wait.job_failed(timed_out)
    assert hf_wait.job_failed({'rc': 2}) and not hf_wait.job_failed({'rc': 0, 'changed': True})


def test_a_failed_jobs_message():
    assert hf_wait.job_failure_message({'failed': True, 'msg': 'gpu-07: downloading x failed'}, 'gpu-07', 'the download',
                                       '1 B of 2 B') == 'gpu-07: downloading x failed'
    assert hf_wait.job_failure_message({'failed': True, 'msg': 'Timeout exceeded', 'child_pid': 9}, 'gpu-07',
                                       'the download', '1 B of 2 B').startswith(
        'gpu-07: the download was stopped by its async time limit (Timeout exceeded); last progress: 1 B of 2 B.')
    assert hf_wait.job_failure_message({'rc': 1}, 'gpu-07', 'the download', '') == (
        'gpu-07: the download failed without a message')


def test_one_line_per_interval_and_the_end_within_a_poll():
    clock, lines = Clock(), []
    out = hf_wait.follow(job_until(clock, 1095.5), clock.sleep, clock, 30, 3600, show=lines.append, host='gpu-07',
                         poll_s=1.0)
    # lines at 30, 60 and 90 s, then the end (seen at the first poll after 95.5 s)
    assert out['rounds'] == 4 == len(lines)
    assert out['finished'] and not out['timed_out'] and out['job'] == {'changed': True, 'finished': True}
    assert out['waited_s'] == 96 and out['polls'] == 97
    assert lines[0] == 'gpu-07: 30 B of 1000 B (3.0%), 10 B/s, 0:01:37 left, file 0/2'
    assert lines[-1].startswith('gpu-07: 1000 B of 1000 B (100.0%)') and lines[-1].endswith('[done]')
    assert max(clock.sleeps) <= 1.0


def test_by_default_the_job_is_polled_every_5_s():
    clock = Clock()
    out = hf_wait.follow(job_until(clock, 1095.5), clock.sleep, clock, 30, 3600)
    assert out['polls'] == 21 and out['waited_s'] == 100 and out['rounds'] == 4
    assert set(clock.sleeps) == {5.0}


def test_the_wait_is_bounded_by_the_timeout():
    clock, lines = Clock(), []
    out = hf_wait.follow(job_until(clock, 10 ** 9), clock.sleep, clock, 30, 300, show=lines.append, host='gpu-07',
                         label='the download')
    assert out['timed_out'] and not out['finished'] and out['waited_s'] == 300
    # lines at 30, 60 ... 270 s, and at 300 s the last one
    assert len(lines) == 10 and lines[-1].endswith('[gave up waiting after 300s]')
    assert out['error'].startswith('gpu-07: the download did not end within 300 s; last progress: 300 B of 1000 B')


def test_a_missing_status_file_stops_the_wait_with_a_remedy():
    clock = Clock()
    out = hf_wait.follow(lambda: (None, None), clock.sleep, clock, 30, 300, host='gpu-07')
    assert out['polls'] == 1 and not out['finished']
    assert 'status file of the job is gone' in out['error'] and 'run the play again' in out['error']


def test_a_stall_is_shown_and_the_wait_goes_on():
    clock, lines = Clock(), []

    def stalled(done):
        return progress(5, since=int(clock() - 1000))
    out = hf_wait.follow(job_until(clock, 1700, prog=stalled), clock.sleep, clock, 300, 3600, show=lines.append,
                         stall_timeout_s=300)
    assert lines[0].endswith('file 0/2 [stalled for 300s]') and out['finished'] and len(lines) == 3


def test_a_job_that_has_not_written_progress_yet():
    assert hf_wait.progress_line(None, 300, '/run/p.json') == 'waiting for the job to start (/run/p.json)'


def test_interval_zero_shows_every_poll_and_a_long_wait_is_one_loop():
    """10,000 rounds (48 h at 17 s) in one call: no recursion, no stack growth."""
    clock, lines = Clock(), []
    polls = {'n': 0}

    def poll():
        polls['n'] += 1
        if polls['n'] > 10000:
            return progress(1000, 'done'), {'finished': True}
        return progress(polls['n'] % 1000), dict(RUNNING)
    out = hf_wait.follow(poll, clock.sleep, clock, 0, 172800, show=lines.append)
    assert out['rounds'] == len(lines) == 10001 and out['finished']


def test_next_delay_never_sleeps_past_the_line_or_the_end():
    assert abs(hf_wait.next_delay(10, 0, 10.4, 30, 100, 1.0) - 0.4) < 1e-9
    assert hf_wait.next_delay(99.5, 0, 120, 30, 100, 1.0) == 0.5
    assert hf_wait.next_delay(10, 0, 40, 30, 100, 1.0) == 1.0
    assert hf_wait.next_delay(10, 0, 5, 30, 100, 1.0) == 0.0


def test_a_job_near_its_end_is_polled_every_second():
    """The end of a job whose progress says it has less than poll_s left is seen within a second."""
    assert hf_wait.next_delay(10, 0, 40, 30, 100, 5.0, eta_s=3) == 3.0
    assert hf_wait.next_delay(10, 0, 40, 30, 100, 5.0, eta_s=0) == hf_wait.ENDGAME_POLL_S == 1.0
    assert hf_wait.next_delay(10, 0, 40, 30, 100, 5.0, eta_s=60) == 5.0
    assert hf_wait.next_delay(10, 0, 40, 30, 100, 0.5, eta_s=0) == 0.5      # never slower than poll_s
    assert hf_wait.eta({'state': 'running', 'eta_s': 4}) == 4.0
    assert hf_wait.eta({'state': 'running', 'eta_s': None}) is None and hf_wait.eta({'state': 'done', 'eta_s': 0}) is None
    clock = Clock()

    def poll():     # all bytes there at 1020 (eta 0), the job ends (links, manifest, marker) at 1021.5
        if clock() >= 1021.5:
            return progress(1000, 'done'), {'finished': True}
        return progress(min(1000, int((clock() - 1000) * 50))), dict(RUNNING)
    out = hf_wait.follow(poll, clock.sleep, clock, 300, 3600, poll_s=5.0)
    assert out['finished'] and clock() - 1021.5 < 1.01, clock()   # seen within a second (5 s polls: at 1025)


def test_the_files_read_over_ssh_with_become_are_split_despite_cr_lf():
    """Over SSH with sudo the read runs on a terminal (ssh -tt): every newline comes back as CR LF. The wait
    must still see the job's status, or it waits 'for the job to start' until its time limit (seen on the lab's
    SSH hosts, a download finished in 1 s)."""
    from ansible_collections.inkling.fleet.plugins.action import hf_wait as action
    status = {'changed': True, 'finished': 1, 'rc': 0}
    printed = '%s\n%s\n%s\n%s\n' % (action.MISSING, action.SEP, json.dumps(status), action.SEP)
    for stdout in (printed, printed.replace('\n', '\r\n')):
        progress_text, status_text = action.split_files(stdout, 2)
        assert progress_text is None
        assert json.loads(status_text) == status
