# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rsync daemon's hold script (hf_peer_daemon.HOLD_SCRIPT), run as rsync runs a pre-xfer exec: a request for
one blob the host does not hold yet waits until the blob appears or the hold passes; anything else passes at once;
it always exits 0 (rsync then serves the blob or says it is missing)."""

import os
import subprocess
import sys
import threading
import time

from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_daemon

ETAG = 'a' * 64
FOLDER = 'models--org--model'


def setup(tmp_path):
    script = str(tmp_path / 'hold-blob.py')
    hf_peer_daemon.write_hold_script(script)
    root = tmp_path / 'cache'
    (root / FOLDER / 'blobs').mkdir(parents=True)
    return script, str(root)


def hold(script, root, request, seconds):
    env = dict(os.environ, RSYNC_REQUEST=request, RSYNC_MODULE_PATH=root)
    t0 = time.monotonic()
    rc = subprocess.run([sys.executable, script, str(seconds)], env=env, check=False).returncode
    return rc, time.monotonic() - t0


def test_the_script_is_private_to_root(tmp_path):
    script, dummy = setup(tmp_path)
    assert os.stat(script).st_mode & 0o777 == 0o700


def test_a_request_for_a_blob_not_there_yet_is_held_until_it_appears(tmp_path):
    script, root = setup(tmp_path)
    blob = os.path.join(root, FOLDER, 'blobs', ETAG)
    appeared = []

    def verify_later():
        time.sleep(1.0)
        with open(blob, 'w') as f:
            f.write('verified')
        appeared.append(time.monotonic())
    t = threading.Thread(target=verify_later)
    t.start()
    rc, took = hold(script, root, 'inkling-hf/%s/blobs/%s' % (FOLDER, ETAG), 30)
    t.join()
    assert rc == 0
    assert 1.0 <= took < 25, took        # it waited for the blob, and not for the whole hold


def test_a_blob_that_does_not_come_is_held_for_the_hold_only(tmp_path):
    script, root = setup(tmp_path)
    rc, took = hold(script, root, 'inkling-hf/%s/blobs/%s' % (FOLDER, ETAG), 1)
    assert rc == 0 and took >= 1.0


def test_other_requests_pass_at_once(tmp_path):
    script, root = setup(tmp_path)
    with open(os.path.join(root, FOLDER, 'blobs', ETAG), 'w') as f:
        f.write('held here')
    for request in ('inkling-hf/%s/blobs/' % FOLDER,                       # a listing
                    'inkling-hf/%s/blobs/%s' % (FOLDER, ETAG),              # a blob this host holds
                    'inkling-hf/%s/blobs/%s.incomplete' % (FOLDER, 'b' * 64),
                    'inkling-hf/%s/blobs/../../etc/%s' % (FOLDER, 'b' * 64),
                    'inkling-hf/models--other--repo/blobs/%s' % ('b' * 64),  # no such repository here
                    ''):
        rc, took = hold(script, root, request, 30)
        assert rc == 0 and took < 10, (request, took)
