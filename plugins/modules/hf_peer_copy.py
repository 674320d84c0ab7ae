#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_peer_copy
short_description: Copy a verified hub cache snapshot from a fleet peer, verify it and mark it complete
version_added: 0.2.0
description:
  - One receiver's part of the C(peer) fan-out of the C(inkling.fleet.hf_cache) role, meant to run as an async
    task on every host that does not hold the snapshot, all at once. Each receiver waits for its source, copies,
    verifies and marks its copy complete on its own, so a host serves the next ones as soon as it holds a verified
    snapshot, without a barrier between the rounds of the doubling tree.
  - 'The source is the receiver''s parent in the doubling tree of O(peers) built from O(roots) (the hosts that
    hold the snapshot or download it from the hub): round by round every holder serves the next receiver in the
    order of O(peers), so the holders double per round and the copy time grows with log2 of the fleet. A holder
    serves one receiver at a time, in round order: a receiver starts once its parent holds a verified snapshot
    and the receiver its parent serves before it does too. A host holds a verified snapshot when its completion
    marker
    C(.inkling/COMMIT.complete), written last by M(inkling.fleet.hf_snapshot) or by this module, is served by the
    source''s rsync daemon module C(inkling-hf-markers).'
  - When the source fails (listed in O(control_file) by the role, its daemon unreachable for
    O(unreachable_timeout_s), its rsync failing after O(retries) retries, or, with O(gave_up_file), its own copy
    ended without a verified snapshot), the receiver copies from the source's ancestors, then from any other peer
    that holds the snapshot. With
    C(abort) in O(control_file), or when every other peer has failed, it gives up without error and returns
    RV(holder=false) with RV(reason=no_source); the role then stages that host from the hub.
  - 'Before copying it fetches the source''s manifest and checks the free space for the blobs it lacks, plus
    O(free_space_margin_pct) (field failure F11). It then copies the blobs and the snapshot links of this commit
    only (not other revisions the source holds), listed from that manifest, from the rsync daemon module
    C(inkling-hf) (C(rsync -rlt --partial), so the layout''s relative links are kept and an interrupted copy
    resumes; owners, modes and special files are not copied), writing progress (bytes done of total, rate, time left) to O(progress_file) for
    M(inkling.fleet.hf_progress).'
  - 'The copy is verified against the manifest the source shipped: every blob is hashed (the source''s stat data
    is not trusted), every link into C(blobs/) checked (a broken link is repaired, F10), every shard named by
    C(model.safetensors.index.json) must resolve. Then refs, owner and modes, this host''s manifest and the
    completion marker (last) are written. A copy that lacks files or holds a wrong one is not marked complete:
    the module returns RV(holder=false) with RV(reason=incomplete) and the problems, and the role fetches what
    is missing from the hub.'
  - Needs C(rsync) on the host and only the Python standard library.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  repo_id:
    description: Hub repository, C(ORG/NAME).
    type: str
    required: true
  revision:
    description: The 40-hex commit to copy (the role resolves a branch or tag once, on the seed).
    type: str
    required: true
  requested_revision:
    description: Branch or tag to record in C(refs/) for RV(revision). Default O(revision).
    type: str
  cache_dir:
    description: Hub cache directory on this host (C(HF_HUB_CACHE)).
    type: path
    required: true
  host:
    description: This host's name in O(peers).
    type: str
    required: true
  peers:
    description: Every host of the fan-out (inventory names), in order; the order decides the tree.
    type: list
    elements: str
    required: true
  addresses:
    description: Address (IPv4, IPv6 or a name) the rsync daemon of each of O(peers) listens on, by name.
    type: dict
    required: true
  roots:
    description: Names of the hosts that hold the snapshot, or download it from the hub, at the start.
    type: list
    elements: str
    required: true
  port:
    description: TCP port of the peers' rsync daemons.
    type: int
    default: 8873
  excludes:
    description: rsync C(--exclude) patterns (partial downloads, state files of the source).
    type: list
    elements: str
    default: []
  allow_patterns:
    description: The role's allow patterns; a source whose manifest was made with other patterns is not used.
    type: list
    elements: str
  ignore_patterns:
    description: The role's ignore patterns (see O(allow_patterns)).
    type: list
    elements: str
  owner:
    description: Owner of the snapshot files (name or uid). Default unchanged.
    type: str
  group:
    description: Group of the snapshot files (name or gid). Default unchanged.
    type: str
  mode:
    description: Mode of the snapshot files, octal string; directories get x where r is set.
    type: str
    default: '0644'
  free_space_margin_pct:
    description: Free space required beyond the bytes to copy, in percent of them.
    type: int
    default: 5
  progress_file:
    description: JSON progress file to write (state C(waiting), C(running), C(done) or C(failed), source, bytes).
    type: path
    required: true
  control_file:
    description:
      - JSON file the role writes while the copies run, read every O(poll_interval_s) seconds.
      - Only a file whose C(run) equals O(control_id) counts (one left by an interrupted run does not).
      - C(dead) lists peers that failed or gave up (never copied from); C(abort) true makes a waiting receiver
        give up (no peer can ever hold the snapshot); C(reason) is shown in the module's message. A missing file means
        nothing failed.
    type: path
    required: true
  control_id:
    description: This run's identifier, written by the role as C(run) in O(control_file).
    type: str
    required: true
  gave_up_file:
    description:
      - File this receiver creates (empty) when it ends without a verified snapshot (it gave up, its copy failed
        verification, or the module failed), so that its own receivers copy from another peer at once instead of
        waiting for it.
      - The other receivers look for a file of the same name in the daemon module C(inkling-hf-run) of each
        source that does not hold the snapshot yet; the role serves the directory of this file there. The name
        carries the run id the hosts of one staging share, so a file left by another run is never read.
      - Omitted, nothing is written and only O(control_file), unreachable daemons and failed copies make a
        source fail.
    type: path
  poll_interval_s:
    description: Seconds between two looks at the source's completion marker.
    type: float
    default: 1.0
  unreachable_timeout_s:
    description:
      - Seconds a source's rsync daemon may refuse or drop connections before the source counts as failed
        (a daemon that could not bind its address, a firewall). A daemon that answers but lists no marker yet
        is waited for without limit.
    type: int
    default: 120
  retries:
    description: Retries of a failed rsync from one source before the next source is tried.
    type: int
    default: 3
  stall_timeout_s:
    description: rsync C(--timeout), in seconds; a transfer that moves no data for this long fails and is retried.
    type: int
    default: 300
  progress_interval_s:
    description: Seconds between progress file updates.
    type: float
    default: 1.0
notes:
  - Does not support check mode; the role reports a copy in check mode as the hub plan of the host.
  - 'The completion marker, plans and progress files are excluded by the source''s daemon, so a copy never carries
    a marker: each host writes its own after its own verification.'
seealso:
  - module: inkling.fleet.hf_snapshot
  - module: inkling.fleet.hf_progress
  - name: rsyncd.conf(5), the daemon modules C(inkling-hf) and C(inkling-hf-markers)
    description: The role's template roles/hf_cache/templates/rsyncd.conf.j2.
    link: https://download.samba.org/pub/rsync/rsyncd.conf.5
'''

EXAMPLES = r'''
- name: Copy from peers in the background (every receiver at once)
  inkling.fleet.hf_peer_copy:
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: "{{ seed_plan.revision }}"
    requested_revision: main
    cache_dir: /var/lib/inkling/huggingface/hub
    host: "{{ inventory_hostname }}"
    peers: [gpu-01, gpu-02, gpu-03]
    addresses: {gpu-01: 10.0.0.11, gpu-02: 10.0.0.12, gpu-03: 10.0.0.13}
    roots: [gpu-01]
    progress_file: /run/inkling-hf-cache/peer.progress.json
    control_file: /run/inkling-hf-cache/peer-control.json
    control_id: "{{ peer_run_id }}"
  async: 172800
  poll: 0
  register: copy_job
'''

RETURN = r'''
holder:
  description: True when this host now holds a verified snapshot of RV(revision) (completion marker written).
  returned: always
  type: bool
reason:
  description: Why RV(holder) is false; C(no_source) (no peer could serve), C(patterns_differ) (the source's file
    set was made with other allow/ignore patterns), C(incomplete) (the copy lacks files or holds wrong ones) or
    C(failed) (the module failed, for example on too little free space).
  returned: when holder is false
  type: str
source:
  description: The peer the snapshot was copied from (or whose manifest was refused, with RV(reason=patterns_differ)).
  returned: when a source was found
  type: str
revision:
  description: The commit.
  returned: always
  type: str
problems:
  description: What the verification of the copy found (path, kind, detail), when RV(reason=incomplete).
  returned: always
  type: list
  elements: dict
hashed_files:
  description: Blobs hashed to verify the copy.
  returned: always
  type: int
bytes_total:
  description: Size of the snapshot's blobs, in bytes.
  returned: when a copy was made
  type: int
files_total:
  description: Blobs of the snapshot.
  returned: when a copy was made
  type: int
waited_s:
  description: Seconds spent waiting for a source to hold a verified snapshot.
  returned: always
  type: float
copy_s:
  description: Seconds spent copying and verifying.
  returned: always
  type: float
failed_sources:
  description: Peers whose copy failed after O(retries) retries, or whose manifest could not be read, in order.
  returned: always
  type: list
  elements: str
copy_errors:
  description: 'Why each failed source failed, as C(PEER: rsync rc N: message) or C(PEER: it gave up ...).'
  returned: always
  type: list
  elements: str
'''

import os
import shutil
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

CACHE_MODULE = 'inkling-hf'
MARKERS_MODULE = 'inkling-hf-markers'
RUN_MODULE = 'inkling-hf-run'


def host_name():
    return os.uname()[1]


def rsync_url(address, port, module, path=''):
    if ':' in address and not address.startswith('['):
        address = '[%s]' % address
    return 'rsync://%s:%d/%s/%s' % (address, port, module, path)


class Peers(object):
    """Where to copy from, and what the role says has failed."""

    def __init__(self, p):
        self.p = p
        self.addr = p['addresses']
        self.chain, self.others = hc.peer_sources(p['host'], p['peers'], p['roots'])
        self.sibling = hc.peer_previous_sibling(p['host'], p['peers'], p['roots'])
        self.unreachable = {}
        self.errors = []
        self.failed = []

    def control(self):
        data = hc.read_json(self.p['control_file'], {}) or {}
        if data.get('run') != self.p['control_id']:
            return set(self.failed), False, ''      # none yet, or left by an interrupted run
        return set(data.get('dead') or []) | set(self.failed), bool(data.get('abort')), data.get('reason') or ''

    def listed(self, name, module, path):
        """rsync's exit status listing path in name's daemon module: 0 listed, 23 not there."""
        url = rsync_url(self.addr[name], self.p['port'], module, path)
        try:
            return subprocess.run(['rsync', '--list-only', '--contimeout=10', '--timeout=30', url],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                                  check=False).returncode
        except subprocess.TimeoutExpired:
            return 30

    def holds(self, name):
        """True when name's daemon serves the completion marker of the commit. A daemon that does not
        answer for unreachable_timeout_s, or one that serves this run's gave-up file, makes name a failed
        source."""
        rc = self.listed(name, MARKERS_MODULE, self.p['revision'] + '.complete')
        if rc == 0:
            self.unreachable.pop(name, None)
            return True
        # 23: no marker yet; 5: the daemon answered with an error (a markers directory missing)
        if rc in (5, 23) and self.p['gave_up_file'] and name not in self.failed and \
                self.listed(name, RUN_MODULE, os.path.basename(self.p['gave_up_file'])) == 0:
            self.failed.append(name)
            self.errors.append('%s: it gave up (its own copy ended without a verified snapshot)' % name)
            return False
        if rc == 23:               # answered: the marker is not there yet (file not found)
            self.unreachable.pop(name, None)
            return False
        since = self.unreachable.setdefault(name, time.time())
        if time.time() - since >= self.p['unreachable_timeout_s'] and name not in self.failed:
            self.failed.append(name)
            self.errors.append('%s: its rsync daemon at %s did not answer for %d s (rsync rc %d)'
                               % (name, rsync_url(self.addr[name], self.p['port'], MARKERS_MODULE), time.time() - since, rc))
        return False


def write_waiting(path, source, started, after=None):
    hc.write_json_atomic(path, {'state': 'waiting', 'source': source, 'after': after, 'started': int(started),
                                'updated': int(time.time()), 'bytes_done': 0, 'bytes_total': 0,
                                'seconds_since_progress': 0, 'pid': os.getpid()}, mode=0o644)


def wait_for_source(peers, p, started):
    """Block until a source holds a verified snapshot. Returns (name, None) or (None, why)."""
    while True:
        dead, abort, why = peers.control()
        if abort:
            return None, why or 'the role stopped the peer copies'
        chain = [c for c in peers.chain if c not in dead]
        if chain and chain[0] == peers.chain[0] and peers.sibling and peers.sibling not in dead:
            # the parent serves its receivers one at a time, in round order
            write_waiting(p['progress_file'], chain[0], started, after=peers.sibling)
            if peers.holds(peers.sibling) and peers.holds(chain[0]):
                return chain[0], None
        elif chain:
            write_waiting(p['progress_file'], chain[0], started)
            if peers.holds(chain[0]):
                return chain[0], None
        else:
            others = [o for o in peers.others if o not in dead]
            if not others:
                return None, 'every other peer failed (%s)' % ', '.join(sorted(dead))
            write_waiting(p['progress_file'], 'any of ' + ', '.join(others), started)
            for name in others:
                if peers.holds(name):
                    return name, None
        time.sleep(p['poll_interval_s'])


def rsync(argv):
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return res.returncode, (res.stderr or res.stdout or '').strip()[-600:]


def fetch_manifest(p, address, rdir):
    """The source's manifest of the commit, read through its daemon."""
    tmpd = tempfile.mkdtemp(prefix='.inkling-peer-', dir=p['cache_dir'])
    try:
        dest = os.path.join(tmpd, 'manifest.json')
        rc, err = rsync(['rsync', '--contimeout=30', '--timeout=%d' % p['stall_timeout_s'],
                         rsync_url(address, p['port'], CACHE_MODULE,
                                   '%s/%s/%s.json' % (os.path.basename(rdir), hc.STATE_DIRNAME, p['revision'])),
                         dest])
        if rc != 0:
            return None, 'rsync rc %d: %s' % (rc, err)
        data = hc.read_json(dest)
        if not isinstance(data, dict) or data.get('revision') != p['revision'] or 'files' not in data:
            return None, 'the manifest it serves is not one of %s' % p['revision']
        return data, None
    finally:
        shutil.rmtree(tmpd, ignore_errors=True)


def blob_bytes(rdir, sizes, counts=None):
    """Bytes of the wanted blobs on disk, counting rsync's temporary files (.NAME.XXXXXX); counts['files']
    gets the number of blobs complete."""
    have = {}
    try:
        names = os.listdir(os.path.join(rdir, 'blobs'))
    except OSError:
        return 0
    for name in names:
        etag = name[1:].split('.', 1)[0] if name.startswith('.') else name
        if etag not in sizes:
            continue
        try:
            size = os.path.getsize(os.path.join(rdir, 'blobs', name))
        except OSError:
            continue
        have[etag] = max(have.get(etag, 0), min(size, sizes[etag]))
    if counts is not None:
        counts['files'] = len([e for e, n in have.items() if n == sizes[e]])
    return sum(have.values())


def copy_from(module, peers, source, rdir, entries, result):
    """rsync the repository folder from source with retries. Returns True when it succeeded."""
    p = module.params
    sizes = dict((e.etag, e.size) for e in entries)
    counts = {}

    def measure():
        done = blob_bytes(rdir, sizes, counts)
        prog.files_done = counts.get('files', 0)
        return done

    prog = hc.Progress(p['progress_file'], len(sizes), sum(sizes.values()), p['progress_interval_s'],
                       measure=measure, extra={'source': source})
    prog.start()
    # this commit's blobs and links only; the source may hold other revisions too
    listing = os.path.join(hc.state_dir(rdir), '%s.peer-files' % p['revision'])
    if not os.path.isdir(hc.state_dir(rdir)):
        os.makedirs(hc.state_dir(rdir))
    with open(listing, 'w') as f:
        for name in sorted(set('blobs/%s' % e.etag for e in entries)
                           | set('snapshots/%s/%s' % (p['revision'], e.path) for e in entries)):
            f.write(name + '\n')
    argv = (['rsync', '-rlt', '--partial', '--files-from=%s' % listing, '--contimeout=30',
             '--timeout=%d' % p['stall_timeout_s']]
            + ['--exclude=%s' % x for x in p['excludes']]
            + [rsync_url(peers.addr[source], p['port'], CACHE_MODULE, os.path.basename(rdir) + '/'), rdir + '/'])
    attempt = 0
    while True:
        rc, err = rsync(argv)
        if rc == 0:
            prog.stop('running')
            os.unlink(listing)
            return True
        dead, dummy, dummy = peers.control()
        if source in dead or attempt >= p['retries']:
            prog.stop('waiting', 'copy from %s failed (rsync rc %d): %s' % (source, rc, err))
            result['copy_errors'].append('%s: rsync rc %d: %s' % (source, rc, err))
            return False
        attempt += 1
        with prog.lock:
            prog.retries += 1
        time.sleep(min(2 ** (attempt - 1), 30))


def verify_and_commit(module, rdir, entries, requested, result):
    """Hash every blob, repair links, check the index; then refs, owner/modes, manifest and marker."""
    p = module.params
    commit = p['revision']
    insp = hc.inspect(rdir, commit, entries, want_hash='all')
    result['hashed_files'] = len(insp['hashed'])
    remaining = []
    for pr in insp['problems']:
        if pr.kind.startswith('link_'):
            hc.fix_link(rdir, commit, [e for e in entries if e.path == pr.path][0])
        else:
            remaining.append(pr)
    if not remaining:
        remaining = hc.check_index(rdir, commit, entries)
    if remaining:
        hc.clear_marker(rdir, commit)
        result['problems'] = [x.to_dict() for x in remaining]
        return False
    uid, gid = hc.resolve_owner(p['owner'], p['group'])
    hc.commit_snapshot(rdir, p['repo_id'], commit, requested, entries, insp['stats'], p['allow_patterns'],
                       p['ignore_patterns'], uid, gid, hc.parse_mode(p['mode']))
    return True


def mark_gave_up(p):
    """Tell this host's receivers, through its daemon, that it will not hold the snapshot in this run."""
    path = p.get('gave_up_file')
    if not path:
        return
    try:
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        with open(path, 'w'):
            pass
        os.chmod(path, 0o644)
    except (IOError, OSError):
        pass                       # the receivers still fail this host over when its daemon stops


def finish(module, result, state, note=None):
    if not result['holder']:
        mark_gave_up(module.params)
    hc.write_json_atomic(module.params['progress_file'], {
        'state': state, 'error': note, 'source': result.get('source'), 'bytes_total': result.get('bytes_total', 0),
        'bytes_done': result.get('bytes_total', 0) if result['holder'] else 0, 'updated': int(time.time()),
        'files_total': result.get('files_total', 0), 'files_done': result.get('files_total', 0) if result['holder'] else 0,
        'rate_bps': int(result.get('bytes_total', 0) / result['copy_s']) if result['holder'] and result['copy_s'] else 0,
        'eta_s': 0 if result['holder'] else None,
        'seconds_since_progress': 0, 'pid': os.getpid()}, mode=0o644)
    module.exit_json(**result)


def run(module):
    p = module.params
    if not hc.is_commit(p['revision']):
        module.fail_json(msg='%s: revision must be a 40-hex commit, not %r' % (host_name(), p['revision']))
    names = p['peers']
    missing = [n for n in names if not p['addresses'].get(n) and n != p['host']]
    if missing:
        module.fail_json(msg='%s: no address for peers %s (hf_cache_peer_address)' % (host_name(), missing))
    if p['host'] not in names:
        module.fail_json(msg='%s: host %s is not one of peers %s' % (host_name(), p['host'], names))
    if not [r for r in p['roots'] if r in names and r != p['host']]:
        module.fail_json(msg='%s: no root among peers %s (roots: %s); nothing to copy from'
                             % (host_name(), names, p['roots']), holder=False, reason='failed')
    rdir = hc.repo_dir(p['cache_dir'], p['repo_id'])
    # a marker this host still has (a manifest made with other patterns, say) must not make it
    # look like a holder to its receivers while it copies
    hc.clear_marker(rdir, p['revision'])
    # the markers directory its daemon serves: a receiver without one would answer its own receivers
    # with an error (chroot failed) and count as unreachable after unreachable_timeout_s
    if not os.path.isdir(hc.state_dir(rdir)):
        os.makedirs(hc.state_dir(rdir))
    want = hc.patterns_key(p['allow_patterns'], p['ignore_patterns'])
    t0 = time.time()
    peers = Peers(p)
    result = {'changed': False, 'holder': False, 'revision': p['revision'], 'problems': [], 'hashed_files': 0,
              'waited_s': 0.0, 'copy_s': 0.0, 'failed_sources': peers.failed, 'copy_errors': peers.errors}
    while True:
        tw = time.time()
        source, why = wait_for_source(peers, p, t0)
        result['waited_s'] = round(result['waited_s'] + time.time() - tw, 1)
        if source is None:
            result.update(reason='no_source', msg='%s: no peer could serve %s@%s: %s; stage it from the hub'
                          % (p['host'], p['repo_id'], p['revision'][:12], why))
            finish(module, result, 'failed', result['msg'])
        tc = time.time()
        shipped, err = fetch_manifest(p, peers.addr[source], rdir)
        if shipped is None:
            peers.failed.append(source)
            result['copy_errors'].append('%s: %s' % (source, err))
            continue
        result['source'] = source
        if shipped.get('patterns') != want:
            result.update(reason='patterns_differ',
                          msg='%s: %s holds %s@%s made with allow/ignore patterns %s, this host wants %s; stage it '
                              'from the hub' % (p['host'], source, p['repo_id'], p['revision'][:12],
                                                shipped.get('patterns'), want))
            finish(module, result, 'failed', result['msg'])
        entries = hc.manifest_entries(shipped)
        sizes = dict((e.etag, e.size) for e in entries)
        result['bytes_total'] = sum(sizes.values())
        result['files_total'] = len(sizes)
        need = result['bytes_total'] - blob_bytes(rdir, sizes)
        ok, msg, space = hc.space_check(p['cache_dir'], need, p['free_space_margin_pct'], p['host'])
        if not ok:
            hc.write_json_atomic(p['progress_file'], {'state': 'failed', 'error': msg, 'source': source},
                                 mode=0o644)
            result.update(reason='failed')
            module.fail_json(msg=msg, space=space, **result)
        result['changed'] = True
        if not copy_from(module, peers, source, rdir, entries, result):
            peers.failed.append(source)
            result['copy_s'] = round(result['copy_s'] + time.time() - tc, 1)
            continue
        holder = verify_and_commit(module, rdir, entries, p['requested_revision'] or shipped.get('requested_revision')
                                   or p['revision'], result)
        result['copy_s'] = round(result['copy_s'] + time.time() - tc, 1)
        result['holder'] = holder
        if holder:
            result['msg'] = '%s: %s@%s copied from %s and verified (%d blobs hashed, %s) in %.0f s after %.0f s waiting' % (
                p['host'], p['repo_id'], p['revision'][:12], source, result['hashed_files'],
                hc.human_bytes(result['bytes_total']), result['copy_s'], result['waited_s'])
            finish(module, result, 'done')
        lines = '; '.join('%s: %s' % (x['path'], x['detail']) for x in result['problems'][:10])
        result.update(reason='incomplete', msg='%s: the copy from %s failed verification (%d problems: %s); it is not '
                      'marked complete, what it lacks is fetched from the hub' % (
                          p['host'], source, len(result['problems']), lines))
        finish(module, result, 'done', result['msg'])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type='str', required=True),
            revision=dict(type='str', required=True),
            requested_revision=dict(type='str'),
            cache_dir=dict(type='path', required=True),
            host=dict(type='str', required=True),
            peers=dict(type='list', elements='str', required=True),
            addresses=dict(type='dict', required=True),
            roots=dict(type='list', elements='str', required=True),
            port=dict(type='int', default=8873),
            excludes=dict(type='list', elements='str', default=[]),
            allow_patterns=dict(type='list', elements='str'),
            ignore_patterns=dict(type='list', elements='str'),
            owner=dict(type='str'),
            group=dict(type='str'),
            mode=dict(type='str', default='0644'),
            free_space_margin_pct=dict(type='int', default=5),
            progress_file=dict(type='path', required=True),
            control_file=dict(type='path', required=True),
            control_id=dict(type='str', required=True),
            gave_up_file=dict(type='path'),
            poll_interval_s=dict(type='float', default=1.0),
            retries=dict(type='int', default=3),
            unreachable_timeout_s=dict(type='int', default=120),
            stall_timeout_s=dict(type='int', default=300),
            progress_interval_s=dict(type='float', default=1.0),
        ),
        supports_check_mode=False,
    )
    try:
        try:
            hc.repo_folder_name(module.params['repo_id'])
            if not os.path.isdir(module.params['cache_dir']):
                os.makedirs(module.params['cache_dir'])
            run(module)
        except (hc.HfCacheError, IOError, OSError) as exc:
            module.fail_json(msg='%s: %s' % (host_name(), exc), holder=False, reason='failed')
    except SystemExit as exc:
        # fail_json exits with 1; an exit without a verified snapshot marked itself (finish)
        if exc.code not in (None, 0):
            mark_gave_up(module.params)
        raise
    except Exception:
        mark_gave_up(module.params)
        raise


if __name__ == '__main__':
    main()
