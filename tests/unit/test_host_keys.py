# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Nothing the collection, the lab or the tests ship turns SSH host key checking off (issue 36, finding 4): a
spoofed host would receive the hub token, the registry password, the API key and the peer secret as module
arguments. The docs may name the settings (to say never); code and configuration may not set them."""

import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OFF = re.compile(r'(host_key_checking\s*[=:]\s*["\']?(false|no|0|off)\b'
                 r'|ANSIBLE_HOST_KEY_CHECKING\s*[=:]\s*["\']?(false|no|0|off)\b'
                 r'|StrictHostKeyChecking[ =]+["\']?(no|off|accept-new)\b'
                 r'|UserKnownHostsFile[ =]+/dev/null)', re.I)
SKIP_DIRS = ('docs/', 'changelogs/')


def tracked_files():
    out = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return [f for f in out.splitlines() if not f.startswith(SKIP_DIRS) and not f.endswith(('.md', '.rst'))
            and f != 'tests/unit/test_host_keys.py']


def test_no_file_turns_host_key_checking_off():
    found = []
    for rel in tracked_files():
        path = os.path.join(REPO, rel)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding='utf-8') as f:
                for n, line in enumerate(f, 1):
                    if OFF.search(line):
                        found.append('%s:%d: %s' % (rel, n, line.strip()))
        except UnicodeDecodeError:
            continue
    assert found == []


def test_the_pattern_catches_each_way_of_turning_it_off():
    for line in ('host_key_checking = false', 'host_key_checking: False', 'ANSIBLE_HOST_KEY_CHECKING=0',
                 '-o StrictHostKeyChecking=no', 'StrictHostKeyChecking accept-new', 'UserKnownHostsFile=/dev/null'):
        assert OFF.search(line), line
    for line in ('StrictHostKeyChecking yes', 'host_key_checking = true'):
        assert not OFF.search(line), line
