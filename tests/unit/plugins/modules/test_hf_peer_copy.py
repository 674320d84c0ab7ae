# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""hf_peer_copy run as Ansible runs it, against real rsync daemons configured by the role's own template
(roles/hf_cache/templates/rsyncd.conf.j2: fleet addresses only, this run's secret only) serving a snapshot
staged by hf_snapshot and hf_download from the lab's hub test double. The hub's file list every receiver
checks against is read from the double the way the controller reads it (hf_fanout.hub_files)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from inkling_test_helpers import needs_program, run_module
import test_hf_snapshot
from test_hf_snapshot import REPO_ID, SHARD, stage

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_fetch as pf
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_relay

hub = test_hf_snapshot.hub   # the module-scoped hub double fixture, shared

pytestmark = needs_program('rsync')

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
TEMPLATE = os.path.join(REPO, 'roles', 'hf_cache', 'templates', 'rsyncd.conf.j2')
with open(os.path.join(REPO, 'roles', 'hf_cache', 'vars', 'main.yml')) as _f:
    EXCLUDES = yaml.safe_load(_f)['__hf_cache_rsyncd_excludes']   # the role's own
DEAD = '127.0.0.9'   # an address where no daemon listens
SECRET = 's3cret-of-this-run'
# the unprivileged user and group the daemon serves as (the role creates its own; Debian has these)
SERVE_USER = 'nobody'
SERVE_GROUP = 'nogroup'
ADDRS = {'src': '127.0.0.1', 'dst': '127.0.0.1', 'a': '127.0.0.2', 'b': '127.0.0.3'}


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def render_rsyncd(tmp, cache, port, rundir=None, address='127.0.0.1', fleet=None, secret=SECRET):
    """The role's daemon configuration for a host at address serving cache; fleet: the fleet's addresses."""
    with open(TEMPLATE) as f:
        source = f.read()
    fleet = fleet or sorted(set(ADDRS.values()))
    secrets = os.path.join(str(tmp), 'rsyncd-%s.secrets' % address)
    with open(secrets, 'w') as f:
        f.write('inkling-fleet:%s\n' % secret)
    os.chmod(secrets, 0o600)
    rundir = rundir or os.path.join(cache, 'run')
    os.makedirs(rundir, exist_ok=True)   # hf_peer_serve makes it before the daemon starts (its lock file is there)
    text = Templar(loader=DataLoader(), variables={
        'ansible_managed': 'test', 'hf_cache_peer_state': {'address': address}, 'hf_cache_peer_port': port,
        '__hf_cache_peer_rundir': rundir,
        'hf_cache_peer_serve_user': SERVE_USER, '__hf_cache_peer_serve_group': SERVE_GROUP,
        'hf_cache_stall_timeout_s': 30, 'hf_cache_dir': cache,
        '__hf_cache_repo_dir': hc.repo_dir(cache, REPO_ID), '__hf_cache_rsyncd_excludes': EXCLUDES,
        '__hf_cache_peer_user': 'inkling-fleet', '__hf_cache_rsyncd_secrets': secrets,
        # the fleet's addresses, as the controller's plan lists them (hf_peer_plan: allow)
        '__hf_cache_fanout': {'allow': list(fleet)}}).template(trust_as_template(source))
    if os.geteuid() != 0:   # chroot and uid switching need root (CI runs as root)
        text = text.replace('use chroot = yes', 'use chroot = no')
        text = '\n'.join(l for l in text.splitlines() if not l.startswith(('uid =', 'gid =')))
    return text


def start_daemon(tmp, cache, port, rundir=None, address='127.0.0.1', **kw):
    """An rsync daemon with the role's configuration, answering on address:port."""
    conf = os.path.join(str(tmp), 'rsyncd-%s.conf' % address)
    if not os.path.isdir(str(tmp)):
        os.makedirs(str(tmp))
    with open(conf, 'w') as f:
        f.write(render_rsyncd(tmp, cache, port, rundir, address, **kw))
    proc = subprocess.Popen(['rsync', '--daemon', '--no-detach', '--config=%s' % conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for dummy in range(50):
        try:
            socket.create_connection((address, port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc


def stop(proc):
    proc.terminate()
    proc.wait(10)


def hub_list(hub_):
    with urllib.request.urlopen('%s/api/models/%s/revision/%s?blobs=true' % (hub_['url'], REPO_ID, hub_['commit'])) as r:
        files, err = hf_fanout.hub_files(json.load(r), hub_['commit'])
    assert err is None, err
    return files


@pytest.fixture(scope='module')
def source(tmp_path_factory, hub):  # pylint: disable=redefined-outer-name
    """A staged, verified snapshot served by an rsync daemon on 127.0.0.1."""
    tmp = tmp_path_factory.mktemp('peer-src')
    cache = str(tmp / 'cache')
    dummy, fin = stage(tmp, hub, cache)
    assert fin['complete'] is True
    port = free_port()
    proc = start_daemon(tmp, cache, port)
    yield {'cache': cache, 'port': port, 'commit': hub['commit'], 'rdir': hc.repo_dir(cache, REPO_ID),
           'files': hub_list(hub)}
    stop(proc)


def P(*pairs):
    """peers and addresses from (name, address) pairs."""
    return [n for n, dummy in pairs], dict(pairs)


def copy(tmp_path, src, dest_cache, peers, roots, host='dst', control=None, env=None, **extra):
    ctl = tmp_path / 'control.json'
    if control is not None:
        ctl.write_text(json.dumps(dict(control, run='run-1')))
    args = {'repo_id': REPO_ID, 'revision': src['commit'], 'requested_revision': 'main', 'cache_dir': dest_cache,
            'files': src['files'], 'host': host, 'peers': peers[0], 'addresses': peers[1], 'roots': roots,
            'port': src['port'], 'secret': SECRET, 'progress_file': str(tmp_path / 'progress.json'),
            'pid_file': str(tmp_path / 'copy.pid'), 'control_file': str(ctl), 'control_id': 'run-1',
            'poll_interval_s': 0.1, 'retries': 0, 'switch_after_s': 2, 'start_timeout_s': 1, 'progress_interval_s': 0.2}
    args.update(extra)
    return run_module('hf_peer_copy', args, env=env, tmp_path=tmp_path)


def listing(url, password=SECRET):
    env = dict(os.environ, RSYNC_PASSWORD=password) if password else dict(os.environ)
    env.pop('RSYNC_PASSWORD', None) if password is None else None
    return subprocess.run(['rsync', '--list-only', '--contimeout=5', url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env, check=False)


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
    assert res['switches'] == [] and res['rejected'] == []
    rdir = hc.repo_dir(dest, REPO_ID)
    # every blob hashed as it arrived, against the hub's list
    assert res['hashed_files'] == len(set(f['etag'] for f in source['files'])) == res['files_total']
    assert os.path.exists(hc.marker_path(rdir, source['commit']))
    assert hc.read_ref(rdir, 'main') == source['commit']
    link = os.path.join(rdir, 'snapshots', source['commit'], SHARD)
    assert os.readlink(link).startswith('../../blobs/')   # relative links kept
    assert not [n for n in os.listdir(os.path.join(rdir, 'blobs')) if n.endswith('.incomplete')]
    # this host's manifest carries this host's stat data, so a re-run hashes nothing
    rc, again = run_module('hf_snapshot', {'phase': 'plan', 'local_only': True, 'repo_id': REPO_ID,
                                           'revision': 'main', 'cache_dir': dest}, tmp_path=tmp_path)
    assert rc == 0 and again['complete'] is True and again['hashed_files'] == 0
    with open(tmp_path / 'progress.json') as f:
        prog = json.load(f)
    assert prog['state'] == 'done' and prog['source'] == 'src' and prog['bytes_done'] == prog['bytes_total'] > 0
    assert prog['files_done'] == prog['files_total'] == res['hashed_files']
    assert not os.path.exists(str(tmp_path / 'copy.pid'))   # removed when the job ends


def test_files_are_relayed_as_they_arrive(tmp_path, source, hub):  # pylint: disable=redefined-outer-name
    """The receiver takes each blob its source holds while the source still lacks the others (pipelined)."""
    a_tmp = tmp_path / 'a'
    a_cache = str(a_tmp / 'cache')
    a_blobs = os.path.join(hc.repo_dir(a_cache, REPO_ID), 'blobs')
    os.makedirs(a_blobs)
    names = sorted(os.listdir(os.path.join(source['rdir'], 'blobs')))
    shutil.copy(os.path.join(source['rdir'], 'blobs', names[0]), a_blobs)
    proc = start_daemon(a_tmp, a_cache, source['port'], address='127.0.0.2')
    got_first = []
    rest_written = []

    def feed():
        first = os.path.join(hc.repo_dir(str(tmp_path / 'cache'), REPO_ID), 'blobs', names[0])
        for dummy in range(100):
            if os.path.exists(first):
                got_first.append(time.time())
                break
            time.sleep(0.05)
        time.sleep(0.5)
        for name in names[1:]:
            shutil.copy(os.path.join(source['rdir'], 'blobs', name), os.path.join(a_blobs, '.tmp'))
            os.rename(os.path.join(a_blobs, '.tmp'), os.path.join(a_blobs, name))
        rest_written.append(time.time())
    t = threading.Thread(target=feed)
    t.start()
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('a', '127.0.0.2'), ('dst', DEAD)), ['a'],
                       switch_after_s=30)
    finally:
        t.join()
        stop(proc)
    assert rc == 0, res
    assert res['holder'] is True and res['sources'] == {'a': res['bytes_total']}
    # The first blob reached this receiver before its source held the others: the feeder writes them only
    # once it has seen the first here (wall clock of this process; the module's own copy_s starts later,
    # after its start-up, which a loaded machine stretches).
    assert got_first and rest_written and got_first[0] < rest_written[0]
    assert res['waited_s'] > 0          # and waited for the rest


def test_a_forged_blob_with_a_forged_manifest_is_rejected(tmp_path, source, hub):  # pylint: disable=redefined-outer-name
    """A source serving another content for a blob (and a manifest and marker that claim it) is dropped at
    once: the receiver checks against the hub's list. With another holder it takes the blob from there."""
    a_tmp = tmp_path / 'a'
    a_cache = str(a_tmp / 'cache')
    shutil.copytree(source['cache'], a_cache, symlinks=True)
    rdir = hc.repo_dir(a_cache, REPO_ID)
    blob = os.path.realpath(os.path.join(rdir, 'snapshots', hub['commit'], SHARD))
    size = os.path.getsize(blob)
    with open(blob, 'wb') as f:
        f.write(b'\0' * size)
    man = hc.load_manifest(rdir, hub['commit'])
    for entry in man['files']:
        if entry['path'] == SHARD:
            entry['etag'] = hc.hash_file(blob, hc.FileEntry(SHARD, size, 'a' * 64, True))
    hc.write_json_atomic(hc.manifest_path(rdir, hub['commit']), man)
    proc = start_daemon(a_tmp, a_cache, source['port'], address='127.0.0.2')
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('a', '127.0.0.2'), ('dst', DEAD)), ['a'])
        assert rc == 0, res
        assert res['holder'] is False and res['reason'] == 'no_source'
        assert len(res['rejected']) == 1 and res['rejected'][0].startswith('a: %s: sha256 is ' % SHARD)
        assert 'another content than the hub' in res['copy_errors'][0] and 'rest is fetched from the hub' in res['msg']
        dest_blobs = os.listdir(os.path.join(hc.repo_dir(str(tmp_path / 'cache'), REPO_ID), 'blobs'))
        assert os.path.basename(blob) not in dest_blobs and not [n for n in dest_blobs if 'incomplete' in n]
        # with a good holder beside it, the receiver switches and completes
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache2'),
                       P(('a', '127.0.0.2'), ('src', '127.0.0.1'), ('dst', DEAD)), ['a', 'src'])
    finally:
        stop(proc)
    assert rc == 0, res
    assert res['holder'] is True and res['failed_sources'] == ['a'] and 'src' in res['sources']
    assert 'switched source 1 time(s): from a after' in res['msg'] and 'now from src' in res['msg']


def test_a_dead_parent_is_skipped_for_its_ancestor_within_the_bound(tmp_path, source):
    # chain root -> a -> b -> c; c's parent b does not answer: after switch_after_s, c takes from a (dead too), root
    peers = P(('root', '127.0.0.1'), ('a', DEAD), ('b', DEAD), ('c', DEAD))
    assert hf_fanout.relay_sources('c', peers[0], ['root']) == ['b', 'a', 'root']
    t0 = time.time()
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'], host='c', switch_after_s=1)
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'root' and res['failed_sources'] == ['b', 'a']
    assert 'refused or did not answer' in res['copy_errors'][0] and time.time() - t0 < 15


def test_a_slow_parent_is_left_for_a_holder_that_has_the_next_file(tmp_path, source):
    """b answers but lacks every blob for longer than switch_after_s while root has them: c switches."""
    b_tmp = tmp_path / 'b'
    proc = start_daemon(b_tmp, str(b_tmp / 'cache'), source['port'], address='127.0.0.3')
    os.makedirs(os.path.join(hc.repo_dir(str(b_tmp / 'cache'), REPO_ID), 'blobs'))
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'),
                       P(('root', '127.0.0.1'), ('b', '127.0.0.3'), ('c', DEAD)), ['root'], host='c', switch_after_s=1)
    finally:
        stop(proc)
    assert rc == 0, res
    assert res['holder'] is True and res['failed_sources'] == ['b'] and res['sources'] == {'root': res['bytes_total']}
    assert 'lacked the next blob for 3 s while root held it' in res['copy_errors'][0]


def test_a_control_file_of_another_run_is_ignored(tmp_path, source):
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'],
                   control={'dead': ['src'], 'abort': True}, control_id='run-0')
    assert rc == 0, res
    assert res['holder'] is True and res['source'] == 'src'


def test_abort_gives_up_without_error(tmp_path, source):
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('root', DEAD), ('dst', DEAD)), ['root'],
                   control={'dead': ['root'], 'abort': True, 'reason': 'the seed failed'},
                   gave_up_file=str(tmp_path / 'run' / 'run-1.gave-up'))
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'no_source' and res['changed'] is False
    assert 'the seed failed' in res['msg'] and 'hub' in res['msg']
    assert os.listdir(str(tmp_path / 'run')) == ['run-1.gave-up']


def test_the_daemon_refuses_a_wrong_secret_and_hosts_outside_the_fleet(tmp_path, source):
    url = 'rsync://inkling-fleet@127.0.0.1:%d/inkling-hf/blobs/' % source['port']
    ok = listing(url)
    assert ok.returncode == 0 and source['files'][0]['etag'] in ok.stdout
    bad = listing(url, password='not-the-secret')
    assert bad.returncode != 0 and 'auth failed' in bad.stderr
    # a receiver with the wrong secret drops the source at once
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'],
                   secret='not-the-secret', switch_after_s=30)
    assert rc == 0 and res['reason'] == 'no_source' and 'auth failed' in res['copy_errors'][0], res
    # a daemon whose fleet does not include 127.0.0.1 refuses it, secret or not
    port = free_port()
    proc = start_daemon(tmp_path, source['cache'], port, address='127.0.0.4', fleet=['127.0.0.5'])
    try:
        denied = listing(url.replace('127.0.0.1:%d' % source['port'], '127.0.0.4:%d' % port))
    finally:
        stop(proc)
    # rsync answers a host that hosts allow does not list as if the module did not exist
    assert denied.returncode != 0 and "@ERROR: Unknown module 'inkling-hf'" in denied.stderr
    assert ok.returncode == 0 and not ok.stderr


def test_the_cache_module_never_serves_manifests_markers_or_partial_files(tmp_path, source):
    partial = os.path.join(source['rdir'], 'blobs', 'e' * 64 + '.incomplete')
    with open(partial, 'w') as f:
        f.write('partial')
    try:
        base = 'rsync://inkling-fleet@127.0.0.1:%d/inkling-hf/' % source['port']
        blobs = listing(base + 'blobs/').stdout
        marker = listing(base + '.inkling/%s.complete' % source['commit'])
    finally:
        os.unlink(partial)
    assert '.incomplete' not in blobs and marker.returncode != 0


def test_the_cache_module_serves_this_repository_only(tmp_path, source):
    """Another repository of the same hub cache is not reachable through the daemon (issue 36, finding 8)."""
    other = os.path.join(source['cache'], 'models--other--private', 'blobs')
    os.makedirs(other)
    with open(os.path.join(other, 'f' * 64), 'w') as f:
        f.write('private weights')
    try:
        root = listing('rsync://inkling-fleet@127.0.0.1:%d/inkling-hf/' % source['port'])
        up = listing('rsync://inkling-fleet@127.0.0.1:%d/inkling-hf/../models--other--private/blobs/' % source['port'])
    finally:
        shutil.rmtree(os.path.dirname(other))
    names = [line.split()[-1] for line in root.stdout.splitlines()]
    assert root.returncode == 0 and 'blobs' in names and 'models--other--private' not in root.stdout, root
    assert up.returncode != 0 and 'f' * 64 not in up.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason='the daemon switches users only when started as root (CI runs as root)')
def test_the_daemon_serves_as_the_unprivileged_user_never_as_root(tmp_path, source):
    """Issue 36, finding 8: each connection is served as the dedicated user, so a file of the repository's folder
    that only root may read (one the container or a fleet neighbour could not have read either) is not served,
    while the snapshot's own files (mode 0644) are."""
    secret_file = os.path.join(source['rdir'], 'blobs', 'e' * 64)
    with open(secret_file, 'w') as f:
        f.write('root only')
    os.chmod(secret_file, 0o600)
    dest = tmp_path / 'dest'
    dest.mkdir()
    env = dict(os.environ, RSYNC_PASSWORD=SECRET)
    url = 'rsync://inkling-fleet@127.0.0.1:%d/inkling-hf/blobs/' % source['port']
    try:
        own = subprocess.run(['rsync', '--contimeout=5', url + 'e' * 64, str(dest)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, env=env, check=False)
        blob = source['files'][0]
        theirs = subprocess.run(['rsync', '--contimeout=5', url + blob['etag'], str(dest)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True, env=env, check=False)
    finally:
        os.unlink(secret_file)
    assert own.returncode != 0 and 'Permission denied' in own.stdout, own.stdout
    assert not (dest / ('e' * 64)).exists()
    assert theirs.returncode == 0 and (dest / blob['etag']).is_file(), theirs.stdout


def test_a_receiver_that_gives_up_says_so_and_its_receivers_switch_at_once(tmp_path, source):
    """root -> a -> c: a ended without a snapshot and wrote its gave-up file, served by a's daemon: c takes
    everything from root at once, without waiting switch_after_s."""
    a_tmp = tmp_path / 'a'
    a_run = a_tmp / 'run'
    a_run.mkdir(parents=True)
    (a_run / 'run-1.gave-up').write_text('')
    (a_run / 'run-0.gave-up').write_text('')
    os.makedirs(os.path.join(hc.repo_dir(str(a_tmp / 'cache'), REPO_ID), 'blobs'))
    proc = start_daemon(a_tmp, str(a_tmp / 'cache'), source['port'], str(a_run), '127.0.0.2')
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('root', '127.0.0.1'), ('a', '127.0.0.2'),
                                                                    ('c', DEAD)),
                       ['root'], host='c', gave_up_file=str(tmp_path / 'run' / 'run-1.gave-up'), switch_after_s=30)
        run_listing = listing('rsync://inkling-fleet@127.0.0.2:%d/inkling-hf-run/' % source['port']).stdout
    finally:
        stop(proc)
    assert rc == 0, res
    assert res['holder'] is True and res['failed_sources'] == ['a'] and res['waited_s'] < 5
    assert res['copy_errors'] == ['a: it gave up (its own copy ended without a verified snapshot)']
    assert not os.path.exists(str(tmp_path / 'run' / 'run-1.gave-up'))   # a holder writes no such file
    names = [line.split()[-1] for line in run_listing.splitlines() if not line.endswith(' .')]
    assert names == ['run-0.gave-up', 'run-1.gave-up']


def test_a_gave_up_file_of_another_run_is_not_read(tmp_path, source):
    a_tmp = tmp_path / 'a'
    (a_tmp / 'run').mkdir(parents=True)
    (a_tmp / 'run' / 'run-0.gave-up').write_text('')
    os.makedirs(os.path.join(hc.repo_dir(str(a_tmp / 'cache'), REPO_ID), 'blobs'))
    proc = start_daemon(a_tmp, str(a_tmp / 'cache'), source['port'], str(a_tmp / 'run'), '127.0.0.2')
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'),
                       P(('root', '127.0.0.1'), ('a', '127.0.0.2'), ('c', DEAD)), ['root'], host='c',
                       gave_up_file=str(tmp_path / 'run' / 'run-1.gave-up'), switch_after_s=2)
    finally:
        stop(proc)
    assert rc == 0, res
    # not dropped for giving up: dropped as slow, after switch_after_s
    assert res['holder'] is True and res['failed_sources'] == ['a'] and 'lacked the next blob' in res['copy_errors'][0]


def test_a_resumed_receiver_keeps_verified_blobs_and_replaces_wrong_ones(tmp_path, source):
    dest = str(tmp_path / 'cache')
    blobs = os.path.join(hc.repo_dir(dest, REPO_ID), 'blobs')
    os.makedirs(blobs)
    names = sorted(os.listdir(os.path.join(source['rdir'], 'blobs')))
    shutil.copy(os.path.join(source['rdir'], 'blobs', names[0]), blobs)
    with open(os.path.join(blobs, names[1]), 'w') as f:
        f.write('wrong')
    rc, res = copy(tmp_path, source, dest, P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'])
    assert rc == 0 and res['holder'] is True, res
    size0 = os.path.getsize(os.path.join(blobs, names[0]))
    assert res['sources']['src'] == res['bytes_total'] - size0


def test_receivers_without_a_root_give_up_instead_of_waiting_for_each_other(tmp_path, source):
    """root is dropped (dead here); b, its other receiver, answers but holds nothing: nobody can get the blobs
    any more, so c gives up after switch_after_s (the role then fetches them from the hub)."""
    b_tmp = tmp_path / 'b'
    os.makedirs(os.path.join(hc.repo_dir(str(b_tmp / 'cache'), REPO_ID), 'blobs'))
    proc = start_daemon(b_tmp, str(b_tmp / 'cache'), source['port'], address='127.0.0.3')
    try:
        t0 = time.time()
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'),
                       P(('root', DEAD), ('b', '127.0.0.3'), ('c', DEAD)), ['root'], host='c', switch_after_s=1,
                       control={'dead': ['root']})
    finally:
        stop(proc)
    assert rc == 0, res
    assert res['holder'] is False and res['reason'] == 'no_source' and time.time() - t0 < 15
    assert 'no root is left' in res['copy_errors'][0]


def test_a_lagging_parent_is_left_for_the_holder_not_for_the_next_ancestor(tmp_path, source):
    """c's sources are b, a, root; b and a hold nothing (a is what starves b): c goes to root, which holds the
    blobs, and not to a."""
    procs = []
    for name, addr in (('a', '127.0.0.2'), ('b', '127.0.0.3')):
        os.makedirs(os.path.join(hc.repo_dir(str(tmp_path / name / 'cache'), REPO_ID), 'blobs'))
        procs.append(start_daemon(tmp_path / name, str(tmp_path / name / 'cache'), source['port'], address=addr))
    try:
        peers = P(('root', '127.0.0.1'), ('a', '127.0.0.2'), ('b', '127.0.0.3'), ('c', DEAD))
        assert hf_fanout.relay_sources('c', peers[0], ['root']) == ['b', 'a', 'root']
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'], host='c', switch_after_s=1)
    finally:
        for proc in procs:
            stop(proc)
    assert rc == 0, res
    assert res['holder'] is True and res['failed_sources'] == ['b'] and res['sources'] == {'root': res['bytes_total']}
    assert res['switches'][0].endswith('while root held it, now from root')


# --- several blobs from one source in one rsync connection --------------------------------------------------------

def rsync_log_shim(tmp_path):
    """A PATH with an rsync that logs its arguments and runs the real one: (env for run_module, read_log)."""
    real = shutil.which('rsync')
    shim = tmp_path / 'shim'
    shim.mkdir()
    log = tmp_path / 'rsync-calls.log'
    (shim / 'rsync').write_text('#!/bin/sh\nprintf "%%s\\n" "$*" >> %s\nexec %s "$@"\n' % (log, real))
    os.chmod(str(shim / 'rsync'), 0o755)

    def calls():
        lines = log.read_text().splitlines() if log.exists() else []
        return ([l for l in lines if '--files-from=' in l],
                [l for l in lines if '--list-only' not in l and '--files-from=' not in l])
    return {'PATH': '%s:%s' % (shim, os.environ['PATH'])}, calls


def test_a_source_holding_several_blobs_hands_them_over_in_one_connection(tmp_path, source):
    env, calls = rsync_log_shim(tmp_path)
    dest = str(tmp_path / 'cache')
    rc, res = copy(tmp_path, source, dest, P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'], env=env)
    assert rc == 0, res
    k = res['files_total']
    assert k > 3 and res['holder'] is True and res['hashed_files'] == k and res['sources'] == {'src': res['bytes_total']}
    batches, single = calls()
    # one listing, then every blob in one rsync connection: no connection per blob
    assert len(batches) == 1 and single == [], (batches, single)
    assert res['connections'] == 1 and 'waiting for a source, in 1 connection(s)' in res['msg']
    rdir = hc.repo_dir(dest, REPO_ID)
    assert not os.path.exists(os.path.join(hc.state_dir(rdir), 'incoming'))   # the inbox is gone
    assert not [n for n in os.listdir(os.path.join(rdir, 'blobs')) if n.startswith('.') or 'incomplete' in n]
    with open(tmp_path / 'progress.json') as f:
        prog = json.load(f)
    assert prog['state'] == 'done' and prog['files_done'] == k and prog['bytes_done'] == prog['bytes_total']


def test_a_single_missing_blob_takes_the_per_blob_path(tmp_path, source):
    """A resumed receiver that lacks one blob fetches it alone, written in place as ETAG.incomplete."""
    env, calls = rsync_log_shim(tmp_path)
    dest = str(tmp_path / 'cache')
    blobs = os.path.join(hc.repo_dir(dest, REPO_ID), 'blobs')
    os.makedirs(blobs)
    names = sorted(os.listdir(os.path.join(source['rdir'], 'blobs')))
    for name in names[1:]:
        shutil.copy(os.path.join(source['rdir'], 'blobs', name), blobs)
    rc, res = copy(tmp_path, source, dest, P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'], env=env)
    assert rc == 0 and res['holder'] is True, res
    batches, single = calls()
    assert batches == [] and len(single) == 1
    assert single[0].split()[-2].endswith('/blobs/' + names[0]) and single[0].endswith('/%s.incomplete' % names[0])


def test_a_forged_blob_in_a_batch_is_rejected_the_verified_ones_kept_and_it_is_refetched(tmp_path, source, hub):  # pylint: disable=redefined-outer-name
    """a serves every blob, one of them forged (its manifest agreeing): the batch from a stops at the forged
    blob, the blobs verified before it stay, a is dropped and the rest, the forged one included, comes from src."""
    a_tmp = tmp_path / 'a'
    a_cache = str(a_tmp / 'cache')
    shutil.copytree(source['cache'], a_cache, symlinks=True)
    rdir = hc.repo_dir(a_cache, REPO_ID)
    etags = sorted(os.listdir(os.path.join(rdir, 'blobs')))
    forged = os.path.join(rdir, 'blobs', etags[len(etags) // 2])   # rsync sends in name order: some come before
    size = os.path.getsize(forged)
    with open(forged, 'wb') as f:
        f.write(b'\1' * size)
    env, calls = rsync_log_shim(tmp_path)
    proc = start_daemon(a_tmp, a_cache, source['port'], address='127.0.0.2')
    try:
        dest = str(tmp_path / 'cache')
        rc, res = copy(tmp_path, source, dest, P(('a', '127.0.0.2'), ('src', '127.0.0.1'), ('dst', DEAD)), ['a', 'src'],
                       env=env)
    finally:
        stop(proc)
    assert rc == 0, res
    entry = hc.FileEntry.from_dict([f for f in source['files'] if f['etag'] == os.path.basename(forged)][0])
    path = entry.path
    assert res['holder'] is True and res['failed_sources'] == ['a']
    assert res['rejected'] == ['a: %s: %s' % (path, res['rejected'][0].split(': ', 2)[2])]
    assert 'is %s, hub says %s' % (hc.hash_file(forged, entry), entry.etag) in res['rejected'][0]
    # the blobs before the forged one came from a, the rest from src, each once
    before = [e for e in etags if e < os.path.basename(forged)]
    sizes = dict((f['etag'], f['size']) for f in source['files'])
    assert res['sources'] == {'a': sum(sizes[e] for e in before), 'src': res['bytes_total'] - sum(sizes[e] for e in before)}
    batches, dummy = calls()
    assert len(batches) >= 2 and '127.0.0.2' in batches[0] and '127.0.0.1' in batches[1]
    assert 'now from src' in res['msg'] and 'rejected 1 blob(s)' in res['msg']
    blob = os.path.join(hc.repo_dir(dest, REPO_ID), 'blobs', os.path.basename(forged))
    assert hc.hash_file(blob, entry) == entry.etag and size == entry.size


def test_a_peer_that_sends_more_than_the_hubs_size_is_stopped_there(tmp_path, source, hub):  # pylint: disable=redefined-outer-name
    """a serves one blob 64 MiB longer than the hub's size (issue 36, finding 9): the receiver stops the transfer as
    soon as it passes the hub's size (the message says so: not the whole file's size), drops a and takes the blob
    from src."""
    a_tmp = tmp_path / 'a'
    a_cache = str(a_tmp / 'cache')
    shutil.copytree(source['cache'], a_cache, symlinks=True)
    rdir = hc.repo_dir(a_cache, REPO_ID)
    etags = sorted(os.listdir(os.path.join(rdir, 'blobs')))
    big = os.path.join(rdir, 'blobs', etags[0])
    with open(big, 'ab') as f:
        f.write(b'\0' * (64 * 1024 * 1024))
    proc = start_daemon(a_tmp, a_cache, source['port'], address='127.0.0.2')
    try:
        dest = str(tmp_path / 'cache')
        rc, res = copy(tmp_path, source, dest, P(('a', '127.0.0.2'), ('src', '127.0.0.1'), ('dst', DEAD)), ['a', 'src'])
    finally:
        stop(proc)
    assert rc == 0, res
    entry = hc.FileEntry.from_dict([f for f in source['files'] if f['etag'] == etags[0]][0])
    assert res['holder'] is True and res['failed_sources'] == ['a']
    assert res['rejected'] == ["a: %s: more than the hub's %d bytes: stopped" % (entry.path, entry.size)]
    blob = os.path.join(hc.repo_dir(dest, REPO_ID), 'blobs', etags[0])
    assert os.path.getsize(blob) == entry.size and hc.hash_file(blob, entry) == entry.etag


def test_the_role_removes_the_inbox_of_a_job_killed_during_a_batch():
    """hf_peer_reset (the role's leftovers) removes the inbox hf_peer_fetch writes a batch into."""
    with open(os.path.join(REPO, 'roles', 'hf_cache', 'vars', 'main.yml')) as f:
        role_vars = yaml.safe_load(f)
    with open(os.path.join(REPO, 'roles', 'hf_cache', 'defaults', 'main.yml')) as f:
        defaults = yaml.safe_load(f)
    variables = dict(defaults, **role_vars)
    variables.update(hf_cache_dir='/srv/hub', hf_cache_repo_id=REPO_ID)
    variables = dict((k, trust_as_template(v) if isinstance(v, str) else v) for k, v in variables.items())
    templar = Templar(loader=DataLoader(), variables=variables)
    leftovers = [templar.template(trust_as_template(x)) for x in role_vars['__hf_cache_peer_leftovers']]
    assert pf.inbox_dir(hc.repo_dir('/srv/hub', REPO_ID)) in leftovers, leftovers


def test_a_batch_whose_source_stops_sending_is_stopped_and_the_source_dropped(tmp_path, source):
    """The bench's killed relay (2026-12-01): the source host vanished mid-batch and rsync, despite --timeout,
    waited 761 s. Here the first batch connection brings nothing for 60 s (an rsync that only sleeps): the copy
    stops it after switch_after_s + STALL_GRACE_S, drops that source and takes everything from the next one."""
    real = shutil.which('rsync')
    shim = tmp_path / 'shim'
    shim.mkdir()
    first = tmp_path / 'first-batch-done'
    (shim / 'rsync').write_text(
        '#!/bin/sh\ncase "$*" in *--files-from=*) if [ ! -e %s ]; then : > %s; exec sleep 60; fi;; esac\nexec %s "$@"\n'
        % (first, first, real))
    os.chmod(str(shim / 'rsync'), 0o755)
    env = {'PATH': '%s:%s' % (shim, os.environ['PATH'])}
    peers = P(('root', '127.0.0.1'), ('a', '127.0.0.1'), ('b', DEAD))
    assert hf_fanout.relay_sources('b', peers[0], ['root']) == ['a', 'root']
    t0 = time.time()
    rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'], host='b', env=env, switch_after_s=2)
    took = time.time() - t0
    assert rc == 0, res
    assert first.exists()
    assert res['holder'] is True and res['source'] == 'root' and res['failed_sources'] == ['a'], res
    assert [e for e in res['copy_errors'] if 'stalled' in e and 'no data for 7 s' in e], res['copy_errors']
    assert took < 40, took


# --- the relay beside the daemon (hf_peer_serve runs module_utils/hf_peer_relay.py in the daemon's unit) ---------
def start_relay(tmp, rdir, address='127.0.0.1', fleet=('127.0.0.1',), secret=SECRET):
    """The relay as hf_peer_serve configures it, serving rdir on address at a free port."""
    secrets = os.path.join(str(tmp), 'relay-%s.secrets' % address)
    with open(secrets, 'w') as f:
        f.write('inkling-fleet:%s\n' % secret)
    cfg = {'address': address, 'port': free_port(), 'allow': list(fleet), 'secrets_file': secrets,
           'user': 'inkling-fleet', 'blobs_dir': os.path.join(rdir, 'blobs'), 'inbox': pf.inbox_dir(rdir),
           'hold_s': 0.5, 'stall_s': 1}
    conf = os.path.join(str(tmp), 'relay-%s.json' % address)
    with open(conf, 'w') as f:
        json.dump(cfg, f)
    proc = subprocess.Popen([sys.executable, hf_peer_relay.__file__, conf], stderr=subprocess.DEVNULL)
    for dummy in range(50):
        try:
            socket.create_connection((address, cfg['port']), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, cfg['port']


def test_every_blob_comes_by_the_relay_when_the_source_runs_one(tmp_path, source):
    env, calls = rsync_log_shim(tmp_path)
    proc, port = start_relay(tmp_path, source['rdir'])
    try:
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), P(('src', '127.0.0.1'), ('dst', DEAD)), ['src'],
                       env=env, relay_port=port)
    finally:
        stop(proc)
    assert rc == 0 and res['holder'] is True and res['rejected'] == [], res
    batches, single = calls()
    assert batches == [] and single == []                       # no rsync transfer at all
    assert res['connections'] == res['files_total'] == res['hashed_files']
    rdir = hc.repo_dir(str(tmp_path / 'cache'), REPO_ID)
    assert os.path.exists(hc.marker_path(rdir, source['commit']))
    assert os.listdir(pf.inbox_dir(rdir)) == []                 # no partial left


def test_a_forged_blob_from_a_relay_is_rejected_and_taken_from_the_next_source(tmp_path, source, hub):  # pylint: disable=redefined-outer-name
    """A relay (or whatever binds its port) that streams forged bytes: the receiver's hash against the hub's list
    rejects the blob, drops that source and takes the blob from the next one."""
    a_rdir = hc.repo_dir(str(tmp_path / 'a'), REPO_ID)
    shutil.copytree(source['rdir'], a_rdir, symlinks=True)
    shard = [f for f in source['files'] if f['path'] == SHARD][0]
    with open(os.path.join(a_rdir, 'blobs', shard['etag']), 'r+b') as f:
        f.write(b'forged')
    proc, port = start_relay(tmp_path, a_rdir, address='127.0.0.2', fleet=('127.0.0.1', '127.0.0.2', '127.0.0.3'))
    try:
        peers = P(('root', '127.0.0.1'), ('a', '127.0.0.2'), ('b', DEAD))
        rc, res = copy(tmp_path, source, str(tmp_path / 'cache'), peers, ['root'], host='b', relay_port=port)
    finally:
        stop(proc)
    assert rc == 0 and res['holder'] is True, res
    assert res['failed_sources'] == ['a'] and [r for r in res['rejected'] if r.startswith('a: %s:' % SHARD)], res
    # the rest came from root by rsync: root runs no relay on that port here
    assert res['sources'].get('root', 0) >= shard['size']
