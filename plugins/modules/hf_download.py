#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_download
short_description: Download the files of a hub cache plan, resumably, with a progress file
version_added: "0.1.0"
description:
  - Downloads the files listed in a plan written by M(inkling.fleet.hf_snapshot) (its C(phase=plan)) into
    the standard hub cache layout, one file at a time, and writes progress (bytes done of total, rate,
    time left) to a JSON file at least every O(progress_interval_s) seconds. Meant to run as an async
    task, polled by M(inkling.fleet.hf_progress).
  - With O(transport=http) each file is fetched with C(huggingface_hub)'s HTTP downloader into
    C(blobs/ETAG.incomplete) and resumed with a C(Range) request from the bytes already on disk, also
    across processes (an interrupted run, a rebooted host). C(huggingface_hub) 2.4.0 alone does not
    resume across processes.
  - With O(transport=xet) each file is fetched with C(hf_hub_download) (Xet storage when the hub offers
    it); a finished file is kept, a partial one is lost when the process dies.
  - Every downloaded blob is hashed (sha256 for LFS files, git blob sha1 for small files) before it is
    moved into C(blobs/) and linked from C(snapshots/COMMIT/). A mismatch deletes the partial file and
    counts as a failed attempt.
  - Failed attempts are retried O(retries) times per file with exponential backoff; a connection that
    delivers no byte for O(stall_timeout_s) seconds is dropped and retried (stall watchdog). Not found,
    unauthorised and out-of-space errors fail at once.
  - Run it with the staging virtual environment's python (C(huggingface_hub) is needed).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  plan_file:
    description: Plan written by M(inkling.fleet.hf_snapshot).
    type: path
    required: true
  progress_file:
    description: JSON progress file to write (state, bytes_done, bytes_total, rate_bps, eta_s, files_done, ...).
    type: path
    required: true
  endpoint:
    description: Hub endpoint or site mirror.
    type: str
    default: https://huggingface.co
  token:
    description:
      - Hub token. Never logged. Prefer O(token_file) when this module runs in the background (C(async)), as a
        background task's payload is a file in the SSH user's home, with the arguments in it.
    type: str
  token_file:
    description:
      - Read the hub token from this root-only file (written by M(inkling.fleet.hf_snapshot) O(token_file)), opened
        without following a link, and removed once read (the token is on disk only until the download starts).
    type: path
    version_added: "0.2.0"
  transport:
    description: V(http) (resumable per file) or V(xet) (C(hf_hub_download), Xet storage when offered).
    type: str
    choices: [http, xet]
    default: http
  retries:
    description: Retries per file after a failed attempt.
    type: int
    default: 5
  stall_timeout_s:
    description: Seconds without a byte after which a connection counts as stalled and is retried.
    type: int
    default: 60
notes:
  - Does not support check mode (M(inkling.fleet.hf_snapshot) reports what would be downloaded).
seealso:
  - module: inkling.fleet.hf_snapshot
  - module: inkling.fleet.hf_progress
extends_documentation_fragment:
  - inkling.fleet.hf_cache.progress
'''

EXAMPLES = r'''
- name: Download what the plan lists, in the background
  inkling.fleet.hf_download:
    plan_file: "{{ plan.plan_file }}"
    progress_file: "{{ plan.progress_file }}"
    endpoint: https://huggingface.co
    token: "{{ vault_hf_token | default(omit) }}"
  vars:
    ansible_python_interpreter: /opt/inkling-fleet/venv/bin/python
  async: 86400
  poll: 0
  register: job
'''

RETURN = r'''
files_downloaded:
  description: Files fetched by this run.
  returned: success
  type: int
bytes_downloaded:
  description: Bytes received by this run (resumed bytes not counted).
  returned: success
  type: int
bytes_resumed:
  description: Bytes that were already on disk from an interrupted run and were not fetched again.
  returned: success
  type: int
retries:
  description: Failed attempts that were retried.
  returned: always
  type: int
seconds:
  description: Wall time of the download.
  returned: success
  type: float
'''

import errno
import os
import sys
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

HF_IMPORT_ERROR = None
try:
    os.environ['HF_HUB_DISABLE_PROGRESS_BARS'] = '1'
    os.environ.setdefault('HF_HUB_DISABLE_TELEMETRY', '1')
    import huggingface_hub
    from huggingface_hub import constants as hf_constants
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import file_download as hf_file_download
    from huggingface_hub.utils import build_hf_headers
except ImportError:
    HF_IMPORT_ERROR = traceback.format_exc()


RESUME_CHUNK = 1024 * 1024


class Fatal(Exception):
    """Not worth retrying (not found, unauthorised, disk full)."""


def is_fatal(exc):
    if isinstance(exc, (IOError, OSError)) and getattr(exc, 'errno', None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS,
                                                                               errno.EACCES):
        return True
    if HF_IMPORT_ERROR is None:
        if isinstance(exc, (hf_errors.RepositoryNotFoundError, hf_errors.RevisionNotFoundError,
                            hf_errors.EntryNotFoundError)):
            return True
        if isinstance(exc, hf_errors.HfHubHTTPError):
            code = getattr(getattr(exc, 'response', None), 'status_code', None)
            return code in (401, 403, 404)
    return False


def fetch_http(rdir, commit, entry, plan, endpoint, headers):
    """One attempt: resume blobs/ETAG.incomplete with Range, hash, move into place."""
    inc = hc.incomplete_path(rdir, entry.etag)
    resume = os.path.getsize(inc) if os.path.exists(inc) else 0
    if resume > entry.size:
        os.unlink(inc)
        resume = 0
    url = huggingface_hub.hf_hub_url(plan['repo_id'], entry.path, revision=commit, endpoint=endpoint)
    with open(inc, 'ab') as f:
        hf_file_download.http_get(url, f, resume_size=resume, headers=dict(headers), expected_size=entry.size,
                                  displayed_filename=entry.path)
    return resume


def fetch_xet(rdir, commit, entry, plan, endpoint, token):
    huggingface_hub.hf_hub_download(plan['repo_id'], entry.path, revision=commit,
                                    cache_dir=plan['cache_dir'], endpoint=endpoint, token=token or False)
    return 0


def finish_blob(rdir, commit, entry, from_incomplete):
    """Hash what was downloaded; move it into blobs/ and link it. Returns the blob stat."""
    src = hc.incomplete_path(rdir, entry.etag) if from_incomplete else hc.blob_path(rdir, entry.etag)
    size = os.path.getsize(src)
    if size != entry.size:
        if from_incomplete and size > entry.size:
            os.unlink(src)
        raise IOError('%s: received %d bytes, hub says %d' % (entry.path, size, entry.size))
    got = hc.hash_file(src, entry)
    if got != entry.etag:
        os.unlink(src)
        raise IOError('%s: %s of the downloaded file is %s, hub says %s' % (entry.path, entry.algo, got, entry.etag))
    if from_incomplete:
        os.chmod(src, 0o644)
        os.rename(src, hc.blob_path(rdir, entry.etag))
    hc.fix_link(rdir, commit, entry)
    return hc.stat_key(hc.blob_path(rdir, entry.etag))


def run(module):
    p = module.params
    if HF_IMPORT_ERROR:
        module.fail_json(msg='%s: huggingface_hub is not importable by %s; run with the hf_cache_venv python'
                             % (os.uname()[1], sys.executable), exception=HF_IMPORT_ERROR)
    if p['token_file']:
        try:
            p['token'] = p['token'] or hc.read_secret_file(p['token_file'], remove=True)
        except OSError as e:
            module.fail_json(msg='%s: cannot read the hub token file %s (%s); the plan (hf_snapshot token_file) '
                                 'writes it before each download' % (os.uname()[1], p['token_file'], e.strerror))
        module.no_log_values.add(p['token'])
    plan = hc.read_json(p['plan_file'])
    if not plan:
        module.fail_json(msg='plan file %s missing or unreadable' % p['plan_file'])
    hf_constants.HF_HUB_DOWNLOAD_TIMEOUT = p['stall_timeout_s']
    # huggingface_hub buffers 10 MiB before writing; what an interruption loses is at most one chunk
    hf_constants.DOWNLOAD_CHUNK_SIZE = RESUME_CHUNK
    if p['transport'] == 'http':
        hf_constants.HF_HUB_DISABLE_XET = True
    rdir, commit = plan['repo_dir'], plan['revision']
    endpoint = p['endpoint'].rstrip('/')
    for sub in ('blobs', os.path.join('snapshots', commit)):
        d = os.path.join(rdir, sub)
        if not os.path.isdir(d):
            os.makedirs(d)
    entries = [hc.FileEntry.from_dict(d) for d in plan['download']]
    headers = build_hf_headers(token=p['token'] or False, library_name='inkling.fleet')
    hashed_file = hc.hashed_path(rdir, commit)
    hashed = hc.read_json(hashed_file, {}) or {}
    prog = hc.Progress(p['progress_file'], len(plan['download']), sum(d['size'] for d in plan['download']),
                       p['progress_interval_s'])
    prog.start()
    t0 = time.time()
    downloaded = resumed = 0
    host = os.uname()[1]
    try:
        for entry in entries:
            bp = hc.blob_path(rdir, entry.etag)
            attempt = 0
            while True:
                inc = hc.incomplete_path(rdir, entry.etag)
                blobs_dir = os.path.dirname(bp)

                def watch(inc=inc, blobs_dir=blobs_dir, etag=entry.etag):
                    # our .incomplete (http) or huggingface_hub's ETAG.XXXXXXXX.incomplete (xet)
                    out = [inc]
                    if p['transport'] == 'xet':
                        try:
                            out += [os.path.join(blobs_dir, n) for n in os.listdir(blobs_dir)
                                    if n.startswith(etag + '.') and n.endswith('.incomplete')]
                        except OSError:
                            pass
                    return out
                with prog.lock:
                    prog.current = (entry, watch)
                try:
                    if os.path.exists(bp) and os.path.getsize(bp) == entry.size:
                        st = finish_blob(rdir, commit, entry, False)   # present already (another process)
                    else:
                        if p['transport'] == 'http':
                            r = fetch_http(rdir, commit, entry, plan, endpoint, headers)
                            resumed += r
                            with prog.lock:
                                prog.resumed += r
                            st = finish_blob(rdir, commit, entry, True)
                        else:
                            fetch_xet(rdir, commit, entry, plan, endpoint, p['token'])
                            st = finish_blob(rdir, commit, entry, False)
                        downloaded += entry.size
                    hashed[entry.etag] = st
                    hc.write_json_atomic(hashed_file, hashed, mode=0o600)
                    with prog.lock:
                        prog.current = None
                        prog.files_done += 1
                        prog.finished_bytes += entry.size
                    break
                except Exception as exc:  # pylint: disable=broad-except
                    if is_fatal(exc) or attempt >= p['retries']:
                        kind = 'fatal' if is_fatal(exc) else 'after %d attempts' % (attempt + 1)
                        raise Fatal('%s: downloading %s from %s failed (%s): %s: %s' % (
                            host, entry.path, endpoint, kind, type(exc).__name__, exc))
                    attempt += 1
                    with prog.lock:
                        prog.retries += 1
                    time.sleep(min(2 ** (attempt - 1), 30))
    except Fatal as exc:
        prog.stop('failed', str(exc))
        remedy = ('Remedy: free space on the cache filesystem' if 'ENOSPC' in str(exc) or 'No space' in str(exc)
                  else 'Remedy: re-run; finished files are kept and partial files resume')
        module.fail_json(msg='%s. %s.' % (exc, remedy), retries=prog.retries)
    except BaseException as exc:  # pylint: disable=broad-except
        prog.stop('failed', '%s: %s' % (type(exc).__name__, exc))
        raise
    prog.stop('done')
    module.exit_json(changed=bool(entries), files_downloaded=len(entries), bytes_downloaded=downloaded - resumed,
                     bytes_resumed=resumed, retries=prog.retries, seconds=round(time.time() - t0, 1),
                     msg='%s: %d files, %s in %.0f s' % (host, len(entries), hc.human_bytes(downloaded - resumed),
                                                         time.time() - t0))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            plan_file=dict(type='path', required=True),
            progress_file=dict(type='path', required=True),
            endpoint=dict(type='str', default='https://huggingface.co'),
            token=dict(type='str', no_log=True),
            token_file=dict(type='path'),
            transport=dict(type='str', default='http', choices=['http', 'xet']),
            retries=dict(type='int', default=5),
            stall_timeout_s=dict(type='int', default=60),
            progress_interval_s=dict(type='float', default=1.0),
        ),
        supports_check_mode=False,
    )
    run(module)


if __name__ == '__main__':
    main()
