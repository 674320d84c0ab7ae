# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""hf_peer_reset: the copy job a killed run left is ended through its pid file, a reused pid is not."""

import json
import os
import subprocess
import sys
import time

from inkling_test_helpers import run_module


def job(tmp_path, name):
    """A process whose command line carries name, in its own process group (as async_wrapper makes it)."""
    script = tmp_path / name
    script.write_text('import time\ntime.sleep(120)\n')
    proc = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    time.sleep(0.3)
    return proc


def reset(tmp_path, pid_file, check_mode=False, **extra):
    args = {'unit': 'inkling-test-no-such-unit', 'pid_file': str(pid_file), 'remove': [str(tmp_path / 'left')]}
    args.update(extra)
    return run_module('hf_peer_reset', args, tmp_path=tmp_path, check_mode=check_mode)


def test_the_job_of_a_killed_run_is_ended_and_its_files_removed(tmp_path):
    proc = job(tmp_path, 'AnsiballZ_hf_peer_copy.py')
    pid_file = tmp_path / 'copy.pid'
    pid_file.write_text(json.dumps({'pid': proc.pid, 'pgid': os.getpgid(proc.pid)}))
    (tmp_path / 'left').mkdir()
    rc, res = reset(tmp_path, pid_file, check_mode=True)
    assert rc == 0 and res['changed'] is True and res['killed'] == [proc.pid] and proc.poll() is None
    rc, res = reset(tmp_path, pid_file)
    assert rc == 0 and res['changed'] is True and res['killed'] == [proc.pid], res
    assert proc.wait(10) is not None
    assert not pid_file.exists() and not (tmp_path / 'left').exists()
    assert 'ended what a killed run of the peer fan-out left' in res['msg']
    rc, res = reset(tmp_path, pid_file)
    assert rc == 0 and res['changed'] is False and res['killed'] == []


def test_a_reused_pid_is_not_signalled(tmp_path):
    proc = job(tmp_path, 'someone_else.py')
    pid_file = tmp_path / 'copy.pid'
    pid_file.write_text(json.dumps({'pid': proc.pid, 'pgid': os.getpgid(proc.pid)}))
    try:
        rc, res = reset(tmp_path, pid_file)
        assert rc == 0 and res['killed'] == [] and res['changed'] is False, res
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
