# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The preflight_fabric_wait action run by ansible against the lab's nvidia-smi stand-in: one line per
round while it waits, no error line, the whole wait, a result the role can use."""

import json
import os
import re
import subprocess
import sys

import pytest

from inkling_test_helpers import COLLECTIONS, REPO

STANDIN = os.path.join(REPO, 'lab', 'nvidia-smi', 'nvidia-smi')
ANSIBLE = os.path.join(os.path.dirname(sys.executable), 'ansible')

pytestmark = pytest.mark.skipif(
    not (os.path.exists(ANSIBLE) and os.path.isdir(os.path.join(COLLECTIONS, 'ansible_collections', 'inkling'))),
    reason='needs ansible next to this python and the collection linked under collections/')


def wait(tmp_path, faults, wait_s, poll_s):
    conf = tmp_path / 'conf'
    (conf / 'faults').mkdir(parents=True)
    (conf / 'profile').write_text('h200-8\n')
    for name in faults:
        (conf / 'faults' / name).write_text('')
    (tmp_path / 'ansible.cfg').write_text('[defaults]\n')
    env = dict(os.environ, INKLING_LAB_CONF_DIR=str(conf), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               ANSIBLE_CONFIG=str(tmp_path / 'ansible.cfg'), ANSIBLE_LOCALHOST_WARNING='false', ANSIBLE_NOCOLOR='1',
               ANSIBLE_DEPRECATION_WARNINGS='false',
               INKLING_LAB_PROFILES_DIR=os.path.join(REPO, 'lab', 'nvidia-smi', 'profiles'))
    proc = subprocess.run(
        [ANSIBLE, 'localhost', '-i', 'localhost,', '-c', 'local', '-o', '-e',
         'ansible_python_interpreter=%s' % sys.executable, '-m', 'inkling.fleet.preflight_fabric_wait', '-a',
         json.dumps({'nvidia_smi_path': STANDIN, 'wait_s': wait_s, 'poll_s': poll_s})],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300, check=False)
    out = proc.stdout.decode()
    lines = [line for line in out.splitlines() if line.strip()]
    result_line = [line for line in lines if line.startswith('localhost | ')]
    assert len(result_line) == 1, out
    result = json.loads(result_line[0].split(' => ', 1)[1])
    return proc.returncode, lines, result


def test_waits_the_whole_time_with_one_line_per_round_and_no_error(tmp_path):
    rc, lines, result = wait(tmp_path, ['fabric-in-progress'], 3, 1)
    assert rc == 0, lines
    progress = [line for line in lines if ' - fabric registration ' in line]
    # polls at 1, 2 and 3 s (a slow poll on a busy machine may take the place of the next one)
    assert len(progress) == result['rounds'] and result['rounds'] in (2, 3), lines
    for line in progress:
        assert re.match(r'^localhost - fabric registration 0 of 8 GPUs after \d+s of 3s$', line), line
    # the last poll is at the end of the wait, not one interval before it
    assert result['waited_s'] >= 3
    assert progress[-1].endswith('after %ds of 3s' % result['waited_s'])
    # nothing else: no error, no retry noise, no GPU facts
    assert len(lines) == len(progress) + 1, lines
    assert not any('ERROR' in line or 'FAILED' in line for line in lines)
    assert result['changed'] is False and 'failed' not in result
    assert (result['complete'], result['registered'], result['total']) == (False, 0, 8)


def test_stops_as_soon_as_the_fabric_is_registered(tmp_path):
    rc, lines, result = wait(tmp_path, [], 120, 1)
    assert rc == 0
    assert [line for line in lines if ' - fabric ' in line] == [
        'localhost - fabric registration 8 of 8 GPUs after 1s of 120s, done']
    assert result['complete'] and result['rounds'] == 1


def test_stops_when_nvidia_smi_fails(tmp_path):
    rc, lines, result = wait(tmp_path, ['no-gpu'], 120, 1)
    assert rc == 0
    assert result['rounds'] == 1 and result['error'].startswith('nvidia-smi failed: nvidia-smi found no NVIDIA GPU')
    assert any(line.startswith('localhost - fabric wait stopped after 1s: nvidia-smi failed') for line in lines)


def test_rejects_a_poll_interval_below_one_second(tmp_path):
    rc, lines, result = wait(tmp_path, [], 10, 0)
    assert rc != 0 and result['msg'].startswith('wait_s must be >= 0 and poll_s >= 1')
