# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""hf_peer_copy run as Ansible runs it, against a real rsync daemon configured by the role's own
template (roles/hf_cache/templates/rsyncd.conf.j2) and serving a snapshot staged by hf_snapshot
and hf_download from the lab's hub test double."""

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from inkling_test_helpers import needs_program, run_module
import test_hf_snapshot
from test_hf_snapshot import REPO_ID, SHARD, stage

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

hub = test_hf_snapshot.hub   # the module-scoped hub double fixture, shared

pytestmark = needs_program('rsync')

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
TEMPLATE = os.path.join(REPO, 'roles', 'hf_cache', 'templates', 'rsyncd.conf.j2')
EXCLUDES = ['*.incomplete', '.inkling/*.complete', '.inkling/*.plan.json', '.inkling/*.hashed.json',
            '.inkling/*.progress.json', '.locks/']
DEAD = '127.0.0.9'   # an address where no daemon listens


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def render_rsyncd(cache, port, rundir=None, address='127.0.0.1'):
    """The role's daemon configuration for a host at address serving cache (and rundir, the copy jobs' state)."""
    with open(TEMPLATE) as f:
        source = f.read()
    hostvars = {'src': {'__hf_cache_peer_addr': '127.0.0.1'}, 'dst': {'__hf_cache_peer_addr': '127.0.0.1'}}
    text = Templar(loader=DataLoader(), variables={
        'ansible_managed': 'test', '__hf_cache_peer_addr': address, 'hf_cache_peer_port': port,
        '__hf_cache_peer_rundir': rundir or os.path.join(cache, 'run'),
        'hf_cache_owner': 'root', 'hf_cache_group': 'root', 'hf_cache_stall_timeout_s': 30, 'hf_cache_dir': cache,
        '__hf_cache_repo_dir': hc.repo_dir(cache, REPO_ID), '__hf_cache_rsync_excludes': EXCLUDES,
        '__hf_cache_fanout': {'peers': ['src', 'dst']}, 'hostvars': hostvars}).template(trust_as_template(source))
    if os.geteuid() != 0:   # chroot and uid switching need root (CI runs as root)
        text = text.replace('use chroot = yes', 'use chroot = no')
        text = '\n'.join(l for l in text.splitlines() if not l.startswith(('uid =', 'gid =')))
    return text


@pytest.fixture(scope='module')
def source(tmp_path_factory, hub):  # pylint: disable=redefined-outer-name
    """A staged, verified snapshot served by an rsync daemon on 127.0.0.1."""
    tmp = tmp_path_factory.mktemp('peer-src')
    cache = str(tmp / 'cache')
    plan, fin = stage(tmp, hub, cache)
    assert fin['complete'] is True
    port = free_port()
    proc = start_daemon(tmp, cache, port)
    yield {'cache': cache, 'port': port, 'commit': hub['commit'], 'rdir': hc.repo_dir(cache, REPO_ID)}
    proc.terminate()
    proc.wait(10)


def start_daemon(tmp, cache, port, rundir=None, address='127.0.0.1'):
    """An rsync daemon with the role's configuration, answering on address:port."""
    conf = tmp / ('rsyncd-%s.conf' % address)
    conf.write_text(render_rsyncd(cache, port, rundir, address))
    proc = subprocess.Popen(['rsync', '--daemon', '--no-detach', '--config=%s' % conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for dummy in range(50):
        try:
            socket.create_connection((address, port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc


def when_waiting(tmp_path, seen, delay, action):
    """A thread that waits for the receiver's first 'waiting' progress line, keeps it in seen,
    then after delay seconds runs action."""
    def run():
        prog = str(tmp_path / 'progress.json')
        for dummy in range(100):
            data = hc.read_json(prog)
            if data and data.get('state') == 'waiting':
                seen.append(hc.progress_message(data))
                break
            time.sleep(0.1)
        time.sleep(delay)
        action()
    return threading.Thread(target=run)


def P(*pairs):
    """peers and addresses from (name, address) pairs."""
    return [n for n, dummy in pairs], dict(pairs)


def copy(tmp_path, src, dest_cache, peers, roots, host='dst', control=None, **extra):
    ctl = tmp_path / 'control.json'
    if control is not None:
        ctl.write_text(json.dumps(dict(control, run='run-1')))
    args = {'repo_id': REPO_ID, 'revision': src['commit'], 'requested_revision': 'main', 'cache_dir': dest_cache,
            'host': host, 'peers': peers[0], 'addresses': peers[1], 'roots': roots, 'port': src['port'], 'excludes': EXCLUDES,
            'progress_file': str(tmp_path / 'progress.json'), 'control_file': str(ctl), 'control_id': 'run-1',
            'poll_interval_s': 0.2, 'retries': 0, 'stall_timeout_s': 30, 'progress_interval_s': 0.2}
    args.update(extra)
    return run_module('hf_peer_copy', args, tmp_path=tmp_path)


def test_copy_is_verified_marked_and_keeps_the_layout(tmp_path, source):
    dest = str(tmp_path / 'cache')
    # another revision the source holds is not copied
    other = os.path.join(source['rdir'], 'blobs', 'f' * 64)
    with open(other, 'wb') as f:
        f.write(b'an older revision')
    try:
        rc, res = copy(tmp_path, source, dest, P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'])
    finally:
        os.unlink(other)
    assert rc == 0, res
    assert not os.path.exists(os.path.join(hc.repo_dir(dest, REPO_ID), 'blobs', 'f' * 64))
    assert res['holder'] is True and res['source'] == 'src' and res['changed'] is True
    rdir = hc.repo_dir(dest, REPO_ID)
    # every blob hashed: the source's stat data is not trusted
    assert res['hashed_files'] == len(os.listdir(os.path.join(source['rdir'], 'blobs')))
    assert os.path.exists(hc.marker_path(rdir, source['commit']))
    assert hc.read_ref(rdir, 'main') == source['commit']
    link = os.path.join(rdir, 'snapshots', source['commit'], SHARD)
    assert os.readlink(link).startswith('../../blobs/')   # relative links kept
    # this host's manifest carries this host's stat data, so a re-run hashes nothing
    man = hc.load_manifest(rdir, source['commit'])
    assert man['files'][0]['stat'] == hc.stat_key(hc.blob_path(rdir, man['files'][0]['etag']))
    rc, again = run_module('hf_snapshot', {'phase': 'plan', 'local_only': True, 'repo_id': REPO_ID,
                                           'revision': 'main', 'cache_dir': dest}, tmp_path=tmp_path)
    assert rc == 0 and again['complete'] is True and again['hashed_files'] == 0
    with open(tmp_path / 'progress.json') as f:
        prog = json.load(f)
    assert prog['state'] == 'done' and prog['source'] == 'src' and prog['bytes_done'] == prog['bytes_total'] > 0
    assert prog['files_done'] == prog['files_total'] == res['hashed_files']


def test_waits_for_the_marker_of_its_parent(tmp_path, source):
    """Until the source holds a verified snapshot (marker), the receiver waits and says so."""
    marker = hc.marker_path(source['rdir'], source['commit'])
    os.rename(marker, marker + '.held')
    seen = []
    t = when_waiting(tmp_path, seen, 1.0, lambda: os.rename(marker + '.held', marker))
    t.start()
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'])
    finally:
        t.join()
        if not os.path.exists(marker):
            os.rename(marker + '.held', marker)
    assert rc == 0, res
    assert res['holder'] is True and res['waited_s'] >= 1.0
    assert seen and seen[0].startswith('waiting for src to hold a verified snapshot')


def test_a_dead_parent_is_skipped_for_its_ancestor(tmp_path, source):
    # peers root, a, b, c: round 1 root -> a; round 2 root -> b, a -> c. c's parent a is dead.
    peers = P(('root', '127.0.0.1'), ('a', DEAD), ('b', DEAD), ('c', DEAD))
    assert hc.peer_sources('c', ['root', 'a', 'b', 'c'], ['root']) == (['a', 'root'], ['b'])
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'], host='c', control={'dead': ['a']})
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'root'


def test_a_control_file_of_another_run_is_ignored(tmp_path, source):
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'],
                   control={'dead': ['src'], 'abort': True}, control_id='run-0')
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'src'


def test_abort_gives_up_without_error(tmp_path, source):
    peers = P(('root', DEAD), ('dst', DEAD))
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'],
                   control={'dead': ['root'], 'abort': True, 'reason': 'the seed failed'})
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'no_source' and res['changed'] is False
    assert 'the seed failed' in res['msg'] and 'hub' in res['msg']
    # nothing copied: only the (empty) markers directory its daemon serves to its own receivers
    rdir = hc.repo_dir(str(tmp_path / 'cache'), REPO_ID)
    assert os.listdir(rdir) == ['.inkling'] and os.listdir(hc.state_dir(rdir)) == []


def test_every_other_peer_dead_gives_up(tmp_path, source):
    peers = P(('root', DEAD), ('dst', DEAD))
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'], control={'dead': ['root']})
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'no_source' and 'every other peer failed' in res['msg']


def test_a_copy_with_a_corrupt_blob_is_not_marked_complete(tmp_path, source, hub):  # pylint: disable=redefined-outer-name
    """The source's marker is no guarantee: its blob rotted after verification (F9/F11 class)."""
    src_tmp = tmp_path / 'src'
    cache = str(src_tmp / 'cache')
    stage(tmp_path, hub, cache)
    rdir = hc.repo_dir(cache, REPO_ID)
    blob = os.path.realpath(os.path.join(rdir, 'snapshots', hub['commit'], SHARD))
    with open(blob, 'r+b') as f:
        f.seek(100)
        f.write(b'rot')
    port = free_port()
    conf = tmp_path / 'rsyncd.conf'
    conf.write_text(render_rsyncd(cache, port))
    proc = subprocess.Popen(['rsync', '--daemon', '--no-detach', '--config=%s' % conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        src = dict(source, port=port)
        rc, res = copy(tmp_path, src, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'])
    finally:
        proc.terminate()
        proc.wait(10)
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'incomplete'
    assert [(p['path'], p['kind']) for p in res['problems']] == [(SHARD, 'blob_hash')]
    assert not os.path.exists(hc.marker_path(hc.repo_dir(str(tmp_path / 'cache'), REPO_ID), hub['commit']))


def test_other_patterns_are_not_copied(tmp_path, source):
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'],
                   allow_patterns=['*.json'])
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'patterns_differ'
    assert not os.path.isdir(os.path.join(hc.repo_dir(str(tmp_path / 'cache'), REPO_ID), 'blobs'))


def test_the_markers_module_serves_markers_only(source):
    url = 'rsync://127.0.0.1:%d/inkling-hf-markers/' % source['port']
    listing = subprocess.run(['rsync', '--list-only', url], stdout=subprocess.PIPE, universal_newlines=True,
                             check=True).stdout
    names = [line.split()[-1] for line in listing.splitlines() if not line.endswith(' .')]
    assert names == ['%s.complete' % source['commit']]
    # and the cache module never serves a marker
    url = 'rsync://127.0.0.1:%d/inkling-hf/%s/.inkling/%s.complete' % (
        source['port'], hc.repo_folder_name(REPO_ID), source['commit'])
    assert subprocess.run(['rsync', '--list-only', url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          check=False).returncode != 0


def test_the_parent_serves_its_earlier_receiver_first(tmp_path, source):
    """peers src, sib, dst: src serves sib in round 1 and dst in round 2, so dst waits for sib
    (which never holds here) until the role reports sib as failed."""
    seen = []
    t = when_waiting(tmp_path, seen, 1.5,
                     lambda: (tmp_path / 'control.json').write_text(json.dumps({'run': 'run-1', 'dead': ['sib']})))
    t.start()
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('sib', DEAD), ('dst', DEAD)),
                       ['src'])
    finally:
        t.join()
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'src' and res['waited_s'] >= 1.5
    assert seen and 'and for sib, which it serves first' in seen[0]


def test_an_unreachable_source_counts_as_failed(tmp_path, source):
    """A source whose daemon never answers (it could not bind, a firewall) is given up after
    unreachable_timeout_s; with no other peer left the receiver stages from the hub."""
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('root', DEAD), ('dst', DEAD)), ['root'],
                   unreachable_timeout_s=1)
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'no_source'
    assert res['failed_sources'] == ['root'] and 'did not answer' in res['copy_errors'][0]


def test_a_stale_marker_of_the_receiver_is_cleared_first(tmp_path, source):
    """A marker left from a snapshot made with other patterns must not be served while copying."""
    dest = str(tmp_path / 'cache')
    rdir = hc.repo_dir(dest, REPO_ID)
    os.makedirs(hc.state_dir(rdir))
    with open(hc.marker_path(rdir, source['commit']), 'w') as f:
        f.write('stale')
    rc, res = copy(tmp_path, source, dest, P(('root', DEAD), ('dst', DEAD)), ['root'], control={'abort': True})
    assert rc == 0 and res['reason'] == 'no_source', res
    assert not os.path.exists(hc.marker_path(rdir, source['commit']))


def test_a_receiver_that_gives_up_says_so_and_its_receivers_copy_from_the_ancestor(tmp_path, source):
    """peers root, a, b, c: c's parent a ended without a snapshot (here: it found no source) and wrote its
    gave-up file, served by a's daemon: c copies from root at once, without the role telling it."""
    # a gives up (its only source is dead), writing the file of this run
    a_tmp = tmp_path / 'a'
    a_tmp.mkdir()
    a_run = a_tmp / 'run'
    rc, res = copy(a_tmp, source, str(a_tmp / 'cache'), P(('root', DEAD), ('a', DEAD)), ['root'], host='a',
                   control={'dead': ['root']}, gave_up_file=str(a_run / 'run-1.gave-up'))
    assert rc == 0 and res['reason'] == 'no_source', res
    assert os.listdir(str(a_run)) == ['run-1.gave-up']
    # a's daemon at 127.0.0.2 (same port) serves its empty cache and that file
    proc = start_daemon(a_tmp, str(a_tmp / 'cache'), source['port'], str(a_run), '127.0.0.2')
    try:
        peers = P(('root', '127.0.0.1'), ('a', '127.0.0.2'), ('b', DEAD), ('c', DEAD))
        c_tmp = tmp_path / 'c'
        c_tmp.mkdir()
        rc, res = copy(c_tmp, source, str(c_tmp / 'cache'), peers, ['root'], host='c',
                       gave_up_file=str(c_tmp / 'run' / 'run-1.gave-up'))
    finally:
        proc.terminate()
        proc.wait(10)
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'root' and res['failed_sources'] == ['a']
    assert res['copy_errors'] == ['a: it gave up (its own copy ended without a verified snapshot)']
    assert res['waited_s'] < 5
    # a holder writes no such file
    assert not os.path.exists(str(c_tmp / 'run' / 'run-1.gave-up'))


def test_a_gave_up_file_of_another_run_is_not_read(tmp_path, source):
    """The file's name carries the run: one left by an earlier run (its daemon kept) does not count."""
    a_tmp = tmp_path / 'a'
    (a_tmp / 'run').mkdir(parents=True)
    (a_tmp / 'run' / 'run-0.gave-up').write_text('')
    proc = start_daemon(a_tmp, str(a_tmp / 'cache'), source['port'], str(a_tmp / 'run'), '127.0.0.2')
    seen = []
    # c waits for a (its parent), which never holds here, until the role reports a as failed
    t = when_waiting(tmp_path, seen, 1.5,
                     lambda: (tmp_path / 'control.json').write_text(json.dumps({'run': 'run-1', 'dead': ['a']})))
    t.start()
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'),
                       P(('root', '127.0.0.1'), ('a', '127.0.0.2'), ('b', DEAD), ('c', DEAD)), ['root'], host='c',
                       gave_up_file=str(tmp_path / 'run' / 'run-1.gave-up'))
    finally:
        t.join()
        proc.terminate()
        proc.wait(10)
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'root' and res['waited_s'] >= 1.5
    assert seen and seen[0].startswith('waiting for a to hold a verified snapshot')


def test_the_run_module_serves_gave_up_files_only(tmp_path, source):
    rundir = tmp_path / 'run'
    rundir.mkdir()
    for name in ('run-1.gave-up', 'peer.progress.json', 'peer-control.json'):
        (rundir / name).write_text('{}')
    proc = start_daemon(tmp_path, str(tmp_path / 'cache'), source['port'], str(rundir), '127.0.0.2')
    try:
        listing = subprocess.run(['rsync', '--list-only', 'rsync://127.0.0.2:%d/inkling-hf-run/' % source['port']],
                                 stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    finally:
        proc.terminate()
        proc.wait(10)
    assert [line.split()[-1] for line in listing.splitlines() if not line.endswith(' .')] == ['run-1.gave-up']


def test_a_receiver_that_waits_answers_its_own_receivers(tmp_path, source):
    """A receiver's job creates its markers directory first: while it waits for its own source, its daemon
    answers 'no marker yet' and its receivers wait for it (they do not count it unreachable and skip it)."""
    a_tmp = tmp_path / 'a'
    a_tmp.mkdir()
    # a's job ran (and gave up here, with no gave_up_file): what it leaves is what a waiting job has made
    rc, res = copy(a_tmp, source, str(a_tmp / 'cache'), P(('root', DEAD), ('a', DEAD)), ['root'], host='a',
                   control={'abort': True})
    assert rc == 0 and res['reason'] == 'no_source', res
    proc = start_daemon(a_tmp, str(a_tmp / 'cache'), source['port'], str(a_tmp / 'run'), '127.0.0.2')
    seen = []
    t = when_waiting(tmp_path, seen, 2.5,
                     lambda: (tmp_path / 'control.json').write_text(json.dumps({'run': 'run-1', 'dead': ['a']})))
    t.start()
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'),
                       P(('root', '127.0.0.1'), ('a', '127.0.0.2'), ('b', DEAD), ('c', DEAD)), ['root'], host='c',
                       unreachable_timeout_s=1)
    finally:
        t.join()
        proc.terminate()
        proc.wait(10)
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'root' and res['waited_s'] >= 2.5
    assert res['failed_sources'] == [] and res['copy_errors'] == []
