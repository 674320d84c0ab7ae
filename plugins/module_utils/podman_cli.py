# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The podman command line as the image modules run it: the binary's lookup, a run bounded in time
with the C locale (podman's messages are classified by text, registry_errors.py), and the classified
retry loop of image_pull and registry_login. Pure except for the subprocess and the sleep, which the
callers' tests replace with a fake podman."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import subprocess
import time

from ansible_collections.inkling.fleet.plugins.module_utils import registry_errors


# The options image_pull and registry_login share (documented by the doc fragment inkling.fleet.podman).
PODMAN_RETRY_ARGS = dict(
    retries=dict(type='int', default=3),
    retry_delay_s=dict(type='int', default=30),
    podman_path=dict(type='str', default='podman'),
    host=dict(type='str', default='this host'),
)


def podman_binary(module, podman_path):
    """``podman_path`` itself when it is a path, else its location on PATH (the module fails when there is none)."""
    return podman_path if '/' in podman_path else module.get_bin_path(podman_path, required=True)


def run_bounded(argv, timeout, what, stdin=None):
    """(rc, stdout and stderr as text) of ``argv`` under LC_ALL=C; (-1, a podman-like error) when it did not
    finish within ``timeout`` seconds (``what``: 'pull', 'login')."""
    try:
        proc = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              env=dict(os.environ, LC_ALL='C'), check=False)
    except subprocess.TimeoutExpired:
        return -1, 'Error: the %s did not finish within %d s (timed out)' % (what, timeout)
    return proc.returncode, (proc.stdout + proc.stderr).decode('utf-8', 'replace')


def with_retries(attempt, retries, delay_s, classify=registry_errors.classify, sleep=time.sleep):
    """Run ``attempt()`` (returning (rc, text)) until it succeeds, fails with an error ``classify`` says is not
    worth retrying, or has run ``retries`` + 1 times, ``delay_s`` apart. Returns (attempts, found): found is
    None on success, else the classification of the last failure; attempts lists each failed attempt's
    number, kind, error and seconds."""
    total = max(retries, 0) + 1
    attempts = []
    for number in range(1, total + 1):
        start = time.time()
        rc, text = attempt()
        if rc == 0:
            return attempts, None
        found = classify(text)
        attempts.append({'attempt': number, 'kind': found['kind'], 'error': found['error'],
                         'seconds': round(time.time() - start, 1)})
        if not found['retry'] or number == total:
            return attempts, found
        sleep(max(delay_s, 0))
    return attempts, None  # not reached: the loop returns
