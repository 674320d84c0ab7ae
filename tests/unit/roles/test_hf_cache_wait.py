# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The hf_cache role's download wait (roles/hf_cache/tasks/wait.yml) run by ansible-playbook on localhost
for more than 1,000 rounds: a wait is a bounded loop, not a task file that includes itself once per round
(ansible-core 2.19.14 stopped the role's former wait.yml, which did, after 246 rounds with 'Exceeded maximum
object depth ... maximum recursion depth exceeded')."""

import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROUNDS = 1000

# A background job standing in for hf_download: it writes a progress file like hf_download does
# until the test creates the stop file, then writes its final state and ends.
JOB = r'''
import json, os, sys, time
progress, stop = sys.argv[1], sys.argv[2]
total, done, t0 = 10 * 1024 ** 3, 0, time.time()
def write(state):
    tmp = progress + '.tmp'
    with open(tmp, 'w') as f:
        json.dump({'state': state, 'bytes_total': total, 'bytes_done': done, 'rate_bps': 1048576,
                   'eta_s': (total - done) // 1048576, 'files_total': 4, 'files_done': done * 4 // total,
                   'seconds_since_progress': 0, 'updated': int(time.time()), 'started': int(t0)}, f)
    os.rename(tmp, progress)
while not os.path.exists(stop) and time.time() - t0 < 600:
    done = min(done + 65536, total)
    write('running')
    time.sleep(0.05)
done = total
write('done')
print('downloaded')
'''

PLAY = '''- name: Follow a stand-in job with the role's wait
  hosts: localhost
  gather_facts: false
  vars:
    hf_cache_progress_interval_s: {interval}
    hf_cache_stall_timeout_s: 300
    hf_cache_download_timeout_s: {timeout}
  tasks:
    - name: Start the stand-in job
      ansible.builtin.command:
        argv: {argv}
      async: 900
      poll: 0
      register: __hf_cache_job
      changed_when: false

    - name: The plan names the progress file
      ansible.builtin.set_fact:
        __hf_cache_plan: {{progress_file: {progress}}}

    - name: Follow it with the role's wait
      ansible.builtin.include_role:
        name: inkling.fleet.hf_cache
        tasks_from: wait
'''


def playbook(tmp_path, argv, interval, timeout, progress):
    """ansible-playbook running PLAY on localhost (local connection), started with subprocess.Popen."""
    play = tmp_path / 'play.yml'
    play.write_text(PLAY.format(argv=[str(a) for a in argv], interval=interval, timeout=timeout, progress=progress))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_FORCE_COLOR='0',
               ANSIBLE_NOCOLOR='1', ANSIBLE_LOCALHOST_WARNING='false', PYTHONUNBUFFERED='1',
               ANSIBLE_CALLBACK_RESULT_FORMAT='json')
    return subprocess.Popen([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,',
                             '-c', 'local', '-e', 'ansible_python_interpreter=' + sys.executable, str(play)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def is_round(line):
    """A progress line of the wait: 'localhost: 1.0 GiB of 10.0 GiB (10.0%), ... left, file 0/4'."""
    return 'localhost: ' in line and ' left, file ' in line


def test_a_wait_of_more_than_1000_rounds_completes(tmp_path):
    progress, stop = tmp_path / 'progress.json', tmp_path / 'stop'
    (tmp_path / 'job.py').write_text(JOB)
    proc = playbook(tmp_path, [sys.executable, tmp_path / 'job.py', progress, stop], 0, 900, progress)
    killer = threading.Timer(300, proc.kill)
    killer.start()
    out, rounds, t0 = [], 0, time.time()
    try:
        for line in proc.stdout:
            out.append(line)
            if is_round(line):
                rounds += 1
                if rounds == ROUNDS:
                    stop.write_text('')      # the stand-in download ends now
        rc = proc.wait()
    finally:
        killer.cancel()
        stop.write_text('')
    text = ''.join(out)
    tail = ''.join(out[-40:])
    # the old shape: '[ERROR]: Exceeded maximum object depth. This may have been caused by excessive role
    # recursion: maximum recursion depth exceeded' after 246 rounds
    assert 'recursion' not in text.lower(), tail
    assert rc == 0, 'rc %d after %d rounds in %.0f s (-9: killed after 300 s; the old shape managed 246 rounds in ' \
                    '490 s, each round slower than the last)\n%s' % (rc, rounds, time.time() - t0, tail)
    assert rounds > ROUNDS, '%d rounds in %.0f s\n%s' % (rounds, time.time() - t0, tail)
    # the last line says the download ended
    assert [line for line in out if is_round(line)][-1].rstrip().endswith('[done]'), tail
    assert 'failed=0' in text


def run_short(tmp_path, argv, timeout):
    t0 = time.time()
    proc = playbook(tmp_path, argv, 1, timeout, tmp_path / 'none.json')
    out = proc.communicate(timeout=120)[0]
    return proc.returncode, out, time.time() - t0


def test_a_failed_job_fails_the_wait_with_its_own_message(tmp_path):
    rc, out, dummy = run_short(tmp_path, [sys.executable, '-c', 'import sys; sys.exit(3)'], 60)
    assert rc == 2, out
    assert 'localhost: waiting for the job to start' in out       # it never wrote a progress file
    assert '"msg": "non-zero return code"' in out and '"rc": 3' in out


def test_a_job_that_does_not_end_in_time_fails_the_wait(tmp_path):
    rc, out, took = run_short(tmp_path, ['sleep', '30'], 2)
    assert rc == 2, out
    assert 'the download did not end within 2 s' in out and '[gave up waiting after 2s]' in out
    assert took < 25


LOST = '''- name: Follow a job on a host that stopped answering
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Follow it (every command on the host fails, as on a host that died)
      inkling.fleet.hf_wait:
        job: {{ansible_job_id: "1.2", results_file: {status}}}
        progress_file: {progress}
        interval_s: 0
        poll_s: 0.2
        unreachable_s: 1
        label: the peer copy
      vars:
        ansible_shell_executable: /bin/false
'''


def test_a_host_that_stops_answering_is_marked_unreachable(tmp_path):
    """A host that died (a killed relay of the peer fan-out) must not hold the play until the job's time limit."""
    play = tmp_path / 'lost.yml'
    play.write_text(LOST.format(status=tmp_path / 'status', progress=tmp_path / 'progress.json'))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCALHOST_WARNING='false')
    t0 = time.time()
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,',
                          '-c', 'local', str(play)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    assert res.returncode == 4, res.stdout         # 4: a host was unreachable
    assert 'UNREACHABLE' in res.stdout and 'lost while following the peer copy: no answer for 1 s' in res.stdout
    assert time.time() - t0 < 60
