#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_peer_copy
short_description: Receive a hub cache snapshot from fleet peers while they still receive it, relaying it on
version_added: "0.2.0"
description:
  - One receiver's part of the C(peer) fan-out of the C(inkling.fleet.hf_cache) role, meant to run as an async
    task on every host that does not hold the snapshot, all at once.
  - 'A pipelined relay: the receiver takes each blob of the snapshot from its parent in the relay (a chain with
    O(degree=1), a tree otherwise; see C(relay_parents) in C(plugins/module_utils/hf_fanout.py)). With
    O(relay_port), the parent''s relay streams the blob while the parent still receives it and this host''s
    relay streams it on as it arrives here, so each hop lags by a piece; the last byte of a blob is sent only
    once the sender verified it. A blob appears under its final name C(blobs/ETAG), which the host''s rsync
    daemon serves, only after its hash matched here. N hosts finish in about one transfer time plus a piece per
    hop (one file per hop by rsync alone), and the hub sends the snapshot once.'
  - 'By rsync (no O(relay_port), or a source whose relay cannot be used): when the source holds several blobs
    this host lacks (it fell behind, or started after its source), they come in one rsync connection
    (C(--files-from) the blob names, into C(.inkling/incoming/)); each is hashed while it
    arrives and moved in as soon as it is complete and verified, while the rest of the batch arrives. Right after
    a blob came the receiver asks for everything it still lacks the same way. A single blob is taken alone into
    C(blobs/ETAG.incomplete).'
  - 'Every byte is checked against O(files), the hub''s file list with sizes and hashes that the controller fetched
    from the hub (M(inkling.fleet.hf_hub_files)) and handed to every host: sha256 for LFS files, the git blob sha1
    for the small ones. Nothing a peer serves is trusted: a peer that serves a blob with another hash (a forged
    or rotten file) is dropped as a source at once and the blob is taken from the next one.'
  - 'A source that does not answer or stalls a transfer for O(switch_after_s) seconds, one that lacks the next
    blob for three times that while another source holds it, and one whose own copy gave up (its O(gave_up_file) served by its daemon) is dropped
    for the next source: the parent''s ancestors, then every other peer (roots first). When none is left, or the
    role says C(abort) in O(control_file), the receiver returns RV(holder=false) with RV(reason=no_source); the
    role then fetches what it still lacks from the hub. Each switch is named in RV(switches), the result''s
    message and the progress file.'
  - 'The peers'' daemons and relays answer only the fleet''s addresses and only with O(secret) (rsync daemon
    authentication, C(auth users) and a C(secrets file) of mode 0600; the relay, HMAC-SHA256 of its random
    challenge); the secret is handed to rsync in its environment, never on a command line, and never sent to a
    relay.'
  - Once every blob is there, it writes the snapshot links (relative, F10), checks that every shard named by
    C(model.safetensors.index.json) resolves, then refs, owner and modes, this host's manifest and the completion
    marker (last).
  - Needs C(rsync) on the host and only the Python standard library.
  - A source whose relay answered with the secret once, or whose daemon answered a listing, is dropped after
    O(switch_after_s) without an answer; one never seen answering gets O(start_timeout_s).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  revision:
    description: The 40-hex commit to copy (the role resolves a branch or tag once).
    type: str
    required: true
  requested_revision:
    description: Branch or tag to record in C(refs/) for RV(revision). Default O(revision).
    type: str
  files:
    description:
      - The hub's files of O(revision) after the allow/ignore patterns, as M(inkling.fleet.hf_hub_files) returns
        them (C(path), C(size), C(etag) = sha256 for LFS files or the git blob sha1, C(lfs)).
      - The only reference every received byte is checked against.
    type: list
    elements: dict
    required: true
  cache_dir:
    description: Hub cache directory on this host (C(HF_HUB_CACHE)).
    type: path
    required: true
  host:
    description: This host's name in O(peers).
    type: str
    required: true
  peers:
    description: Every host of the fan-out (inventory names), in order; the order decides the relay.
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
  degree:
    description: Receivers each host relays to; 1 is a chain (the fastest when the snapshot has more files than
      the fleet has hosts, see docs/hf-cache.md).
    type: int
    default: 1
  port:
    description: TCP port of the peers' rsync daemons.
    type: int
    default: 8873
  user:
    description: rsync daemon user of the peers' C(auth users).
    type: str
    default: inkling-fleet
  secret:
    description: This run's secret for the peers' daemons (generated on the controller by the role).
    type: str
    required: true
  allow_patterns:
    description: The role's allow patterns (recorded in the manifest).
    type: list
    elements: str
  ignore_patterns:
    description: The role's ignore patterns (recorded in the manifest).
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
    default: 10
  progress_file:
    description: JSON progress file to write (state, source, bytes, files, switches).
    type: path
    required: true
  pid_file:
    description: File holding this job's process id while it runs, read by M(inkling.fleet.hf_peer_reset) when
      a later run finds the job of a killed run. Removed when the job ends.
    type: path
  control_file:
    description:
      - JSON file the role writes while the copies run, read at every look.
      - Only a file whose C(run) equals O(control_id) counts (one left by an interrupted run does not).
      - C(dead) lists peers that failed (never copied from); C(abort) true makes the receiver give up;
        C(reason) is shown in the module's message. A missing file means nothing failed.
    type: path
    required: true
  control_id:
    description: This run's identifier, written by the role as C(run) in O(control_file).
    type: str
    required: true
  gave_up_file:
    description:
      - File this receiver creates (empty) when it ends without a verified snapshot, so that its own receivers
        switch to another source at once; they look for a file of that name in each source's daemon module
        C(inkling-hf-run). The name carries the run id, so a file left by another run is never read.
    type: path
  relay_port:
    description:
      - The port of the peers' relays (C(hf_peer_relay), started with their rsync daemons by
        M(inkling.fleet.hf_peer_serve)); V(0) takes every blob by rsync.
      - A source's relay streams this host the first blob it lacks that the source holds, or is receiving now,
        while it arrives there; this host writes it to C(.inkling/incoming/ETAG.part), which its own relay streams
        on, and moves it to C(blobs/ETAG) only once its size and hash are the hub's. A source whose relay cannot be
        used (not running, refused) is asked by rsync for the rest of the run.
    type: int
    default: 0
  poll_interval_s:
    description: Seconds between two looks at a source that does not hold the next blob yet.
    type: float
    default: 0.5
  switch_after_s:
    description: Seconds after which a source that does not answer or stalls a transfer (rsync C(--timeout)) is
      dropped for the next source; one that lacks the next blob for three times this while another source holds
      it is dropped for that source.
    type: int
    default: 30
  start_timeout_s:
    description: Seconds from the start of the job a source's daemon that never answered yet may take to answer
      (its host may start it later than this one); after it answered once, O(switch_after_s) applies.
    type: int
    default: 120
  retries:
    description: Retries of a failed transfer from one source before the next source is tried.
    type: int
    default: 3
notes:
  - Does not support check mode; the role reports a copy in check mode as the hub plan of the host.
  - 'The peers'' daemons never serve partial files, dot files (rsync''s temporary files, C(.inkling/) with the
    manifests and markers) or C(.locks/): a blob is served once its holder verified it.'
seealso:
  - module: inkling.fleet.hf_hub_files
  - module: inkling.fleet.hf_peer_reset
  - module: inkling.fleet.hf_snapshot
  - module: inkling.fleet.hf_progress
  - name: rsyncd.conf(5), the daemon modules C(inkling-hf) and C(inkling-hf-run)
    description: The role's template roles/hf_cache/templates/rsyncd.conf.j2.
    link: https://download.samba.org/pub/rsync/rsyncd.conf.5
extends_documentation_fragment:
  - inkling.fleet.hf_cache
  - inkling.fleet.hf_cache.progress
'''

EXAMPLES = r'''
- name: Receive from peers in the background (every receiver at once)
  inkling.fleet.hf_peer_copy:
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: "{{ fanout.commit }}"
    requested_revision: main
    files: "{{ hub_files.files }}"
    cache_dir: /var/lib/inkling/huggingface/hub
    host: "{{ inventory_hostname }}"
    peers: [gpu-01, gpu-02, gpu-03]
    addresses: {gpu-01: 10.0.0.11, gpu-02: 10.0.0.12, gpu-03: 10.0.0.13}
    roots: [gpu-01]
    secret: "{{ peer_secret }}"
    progress_file: /run/inkling-hf-cache/peer.progress.json
    control_file: /run/inkling-hf-cache/peer-control.json
    control_id: "{{ fanout.run }}"
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
  description: Why RV(holder) is false; C(no_source) (no peer could serve every blob; the role fetches the rest
    from the hub), C(incomplete) (the links or the safetensors index are wrong) or C(failed) (the module failed,
    for example on too little free space).
  returned: when holder is false
  type: str
source:
  description: The last peer blobs were taken from.
  returned: when a blob was copied
  type: str
sources:
  description: Bytes taken from each peer.
  returned: always
  type: dict
revision:
  description: The commit.
  returned: always
  type: str
problems:
  description: What the check of the links and the index found (path, kind, detail), when RV(reason=incomplete).
  returned: always
  type: list
  elements: dict
rejected:
  description: 'Blobs a peer served with a size or hash other than the hub''s, as C(PEER: PATH: detail).'
  returned: always
  type: list
  elements: str
switches:
  description: 'Each change of source, as C(from A to B after N s: why).'
  returned: always
  type: list
  elements: str
hashed_files:
  description: Blobs hashed (received, or found on disk) to verify the copy.
  returned: always
  type: int
bytes_total:
  description: Size of the snapshot's blobs, in bytes.
  returned: always
  type: int
files_total:
  description: Blobs of the snapshot.
  returned: always
  type: int
connections:
  description: Connections that fetched blobs (one per blob streamed by a relay, one per blob taken alone by rsync,
    one per rsync batch of the blobs a source held); the listings and the relays' empty answers are not counted.
  returned: always
  type: int
waited_s:
  description: Seconds spent waiting for a source to hold the next blob (with the relay, only the waits after a
    source's relay answered that it held none of them; a stream that waits for the bytes its source still
    receives is not counted).
  returned: always
  type: float
copy_s:
  description: Seconds from the start to the end of the job.
  returned: always
  type: float
relay_fallbacks:
  description: Peers whose relay could not be used (not running, refused, gone), each with why; blobs were asked of
    them by rsync for the rest of the run.
  returned: always
  type: dict
failed_sources:
  description: Peers dropped as sources, in order.
  returned: always
  type: list
  elements: str
copy_errors:
  description: 'Why each dropped source was dropped.'
  returned: always
  type: list
  elements: str
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_fetch as pf


def write_pid(path):
    if path:
        hc.write_json_atomic(path, {'pid': os.getpid(), 'pgid': os.getpgid(0), 'started': int(time.time())},
                             mode=0o600)


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
        pass                       # the receivers still drop this host when its daemon stops


def finish(module, result, prog, state, note=None):
    p = module.params
    if not result['holder']:
        mark_gave_up(p)
    if prog is not None:
        prog.extra.update(switches=result['switches'])
        prog.stop(state, note)
    else:
        hc.write_json_atomic(p['progress_file'], {'state': state, 'error': note, 'updated': int(time.time()),
                                                  'bytes_total': result['bytes_total'], 'bytes_done': 0,
                                                  'files_total': result['files_total'], 'files_done': 0,
                                                  'seconds_since_progress': 0, 'pid': os.getpid()}, mode=0o644)
    if p.get('pid_file') and os.path.exists(p['pid_file']):
        os.unlink(p['pid_file'])
    module.exit_json(**result)


def describe(result):
    parts = []
    if result.get('relay_fallbacks'):
        parts.append('took whole blobs by rsync from %s (%s)' % (
            ', '.join(sorted(result['relay_fallbacks'])),
            '; '.join('%s: %s' % kv for kv in sorted(result['relay_fallbacks'].items()))))
    if result['switches']:
        parts.append('switched source %d time(s): %s' % (len(result['switches']), '; '.join(result['switches'])))
    if result['rejected']:
        parts.append('rejected %d blob(s) that did not match the hub: %s'
                     % (len(result['rejected']), '; '.join(result['rejected'][:5])))
    return (' (%s)' % '; '.join(parts)) if parts else ''


def run(module):
    p = module.params
    if not hc.is_commit(p['revision']):
        module.fail_json(msg='%s: revision must be a 40-hex commit, not %r' % (pf.host_name(), p['revision']))
    names = p['peers']
    missing = [n for n in names if not p['addresses'].get(n) and n != p['host']]
    if missing:
        module.fail_json(msg='%s: no address for peers %s (hf_cache_peer_address)' % (pf.host_name(), missing))
    if p['host'] not in names:
        module.fail_json(msg='%s: host %s is not one of peers %s' % (pf.host_name(), p['host'], names))
    if not [r for r in p['roots'] if r in names and r != p['host']]:
        module.fail_json(msg='%s: no root among peers %s (roots: %s); nothing to copy from'
                             % (pf.host_name(), names, p['roots']), holder=False, reason='failed')
    try:
        entries = [hc.FileEntry.from_dict(f) for f in p['files']]
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg='%s: files must be the hub list of inkling.fleet.hf_hub_files (path, size, etag, lfs): %s'
                             % (pf.host_name(), exc))
    if not entries:
        module.fail_json(msg='%s: the hub list of %s@%s is empty' % (pf.host_name(), p['repo_id'], p['revision']))
    write_pid(p['pid_file'])
    rdir = hc.repo_dir(p['cache_dir'], p['repo_id'])
    # a marker this host still has must not make it look like a holder while it copies
    hc.clear_marker(rdir, p['revision'])
    for d in (os.path.join(rdir, 'blobs'), hc.state_dir(rdir)):
        if not os.path.isdir(d):
            os.makedirs(d)
    pf.clear_inbox(rdir)          # what a killed run's batch left
    blobs, seen = [], set()
    for e in entries:
        if e.etag not in seen:
            seen.add(e.etag)
            blobs.append(e)
    t0 = time.time()
    src = pf.Sources(p)
    result = {'changed': False, 'holder': False, 'revision': p['revision'], 'problems': [], 'hashed_files': 0,
              'connections': 0, 'waited_s': 0.0, 'copy_s': 0.0, 'failed_sources': src.failed, 'copy_errors': src.errors,
              'switches': src.switches, 'rejected': [], 'sources': {}, 'relay_fallbacks': src.no_relay,
              'bytes_total': sum(e.size for e in blobs), 'files_total': len(blobs)}
    have = pf.local_blobs(rdir, blobs)
    result['hashed_files'] = len(have)
    need = [e for e in blobs if e.etag not in have]
    ok, msg, space = hc.space_check(p['cache_dir'], sum(e.size for e in need), p['free_space_margin_pct'], p['host'])
    if not ok:
        hc.write_json_atomic(p['progress_file'], {'state': 'failed', 'error': msg}, mode=0o644)
        result.update(reason='failed')
        module.fail_json(msg=msg, space=space, **result)
    done = {'bytes': sum(e.size for e in blobs if e.etag in have), 'files': len(have)}

    def measure():
        prog.files_done = done['files']
        return done['bytes'] + prog.current_bytes()

    prog = hc.Progress(p['progress_file'], len(blobs), result['bytes_total'], p['progress_interval_s'],
                       measure=measure, extra={'source': None})
    prog.start()

    def verified(entry, name):
        need.remove(entry)
        result['changed'] = True
        result['hashed_files'] += 1
        done['bytes'] += entry.size
        done['files'] += 1
        result['source'] = name
        result['sources'][name] = result['sources'].get(name, 0) + entry.size

    attempts = {}

    def failed(name, kind, detail, bad):
        """A transfer from name ended with kind 'hash', 'stalled' or another failure: drop or retry name."""
        if kind == 'hash':
            result['rejected'].append('%s: %s: %s' % (name, bad.path, detail))
            src.drop(name, 'it served %s with another content than the hub (%s)' % (bad.path, detail))
        elif kind == 'stalled':
            src.drop(name, 'its transfer stalled: %s' % detail)
        else:
            attempts[name] = attempts.get(name, 0) + 1
            with prog.lock:
                prog.retries += 1
            if attempts[name] > p['retries']:
                src.drop(name, 'its transfers failed %d times (%s)' % (attempts[name], detail))
            else:
                time.sleep(min(2 ** (attempts[name] - 1), 10) * 0.5)

    waiting, streak = None, False
    while need:
        dead, abort, why = src.control()
        cands = src.candidates(dead)
        if abort or not cands:
            why = (why or 'the role stopped the peer copies') if abort else \
                'every other peer failed (%s)' % ', '.join(src.errors or sorted(dead))
            result.update(reason='no_source', copy_s=round(time.time() - t0, 1),
                          msg='%s: no peer could serve %s@%s: %s; %d of %d blobs received and verified, the rest is '
                              'fetched from the hub%s' % (p['host'], p['repo_id'], p['revision'][:12], why,
                                                          done['files'], len(blobs), describe(result)))
            finish(module, result, prog, 'failed', result['msg'])
        cur = cands[0]
        if src.current != cur:
            if src.current is None and src.switches:
                src.switches[-1] += ', now from %s' % cur
            src.use(cur)
            prog.extra['source'] = cur
        if src.relay(cur):
            # the source streams the first blob this host lacks that it holds or is receiving now, piece by piece
            asked = time.time()
            got, kind, detail, bad = pf.receive_relay(src, cur, rdir, need, prog, lambda e, c=cur: verified(e, c))
            if kind == 'relay':
                # not usable (not running, refused): rsync from this source, as before the relay; its listing
                # decides whether the source is gone
                src.no_relay[cur] = detail
                continue
            if kind == 'gone':
                src.drop(cur, 'its relay answered before and now does not (%s)' % detail)
                continue
            if kind == 'missing' and detail == 'ended':
                # the stream broke off: its source's own transfer stalled or failed, or the source went away; the
                # next request says which (a source that went away is dropped at once), with no wait counted
                continue
            if kind != 'missing':
                result['connections'] += 1
                if waiting is not None:
                    result['waited_s'] = round(result['waited_s'] + asked - waiting, 1)
                    waiting = None
                if kind is not None:
                    failed(cur, kind, detail, bad)
                continue
            ready = []
        elif streak:
            # right after a blob came, ask for what this host lacks straight away, in one connection (rsync takes
            # the blobs the source holds and skips the others): a source that relays in the same order usually
            # holds the next one by now, and one that is ahead (this host fell behind) hands over all it holds
            ready = list(need)
        else:
            listing = src.listing(cur)
            if listing is None:
                time.sleep(p['poll_interval_s'])
                continue
            ready = [e for e in need if listing.get(e.etag) == e.size]
        if ready:
            if waiting is not None:
                result['waited_s'] = round(result['waited_s'] + time.time() - waiting, 1)
                waiting = None
            result['connections'] += 1
            if len(ready) == 1:
                # one blob: one connection, written in place as blobs/ETAG.incomplete
                ok, kind, detail = pf.receive(src, cur, rdir, ready[0], prog)
                got, bad = 0, ready[0]
                if ok:
                    got, bad = 1, None
                    verified(ready[0], cur)
            else:
                # several: every one the source holds in one connection, each moved in once verified
                got, kind, detail, bad = pf.receive_batch(src, cur, rdir, ready, prog,
                                                          lambda e, c=cur: verified(e, c))
            streak = got > 0
            if kind == 'missing':
                continue                   # not there yet: the listing decides
            if kind is not None:
                failed(cur, kind, detail, bad)
            continue
        # the source lacks every blob this host still needs: it may still receive it, or be slow or stuck
        if waiting is None:
            waiting = time.time()
        if src.gave_up(cur):
            src.drop(cur, 'it gave up (its own copy ended without a verified snapshot)')
            continue
        # a source that lacks the next blob may be waiting for its own source, which its receivers give
        # switch_after_s to answer: it is left only after three times that, so that a dead relay's orphan
        # takes over before the hosts behind it crowd onto one ancestor
        if time.time() - max(waiting, src.since) >= 3 * p['switch_after_s']:
            for other in cands[1:]:
                lst = src.listing(other)
                if lst and [e for e in need if lst.get(e.etag) == e.size]:
                    # to that holder, not to the next in order (which may be what starves cur)
                    src.order.remove(other)
                    src.order.insert(src.order.index(cur) + 1, other)
                    src.drop(cur, 'it lacked the next blob for %d s while %s held it' % (3 * p['switch_after_s'], other))
                    break
            else:
                if not [c for c in cands if c in p['roots']]:
                    # every root was dropped: what no peer holds now can reach none of them any more
                    src.drop(cur, 'no root is left to serve the %d blob(s) no peer holds' % len(need))
                    for other in cands[1:]:
                        src.drop(other, 'no root is left to serve the %d blob(s) no peer holds' % len(need))
                    continue
                waiting = time.time() - p['switch_after_s'] / 2.0   # look at the others again later, not every poll
        time.sleep(p['poll_interval_s'])
    if waiting is not None:
        result['waited_s'] = round(result['waited_s'] + time.time() - waiting, 1)
    commit = p['revision']
    for e in entries:
        hc.fix_link(rdir, commit, e)
    problems = [x for x in (hc.check_link(rdir, commit, e) for e in entries) if x is not None]
    problems = problems or hc.check_index(rdir, commit, entries)
    result['copy_s'] = round(time.time() - t0, 1)
    if problems:
        result['problems'] = [x.to_dict() for x in problems]
        result.update(reason='incomplete', msg='%s: the copy of %s@%s has wrong links or index (%s); it is not marked '
                      'complete' % (p['host'], p['repo_id'], commit[:12],
                                    '; '.join('%s: %s' % (x.path, x.detail) for x in problems[:10])))
        finish(module, result, prog, 'done', result['msg'])
    uid, gid = hc.resolve_owner(p['owner'], p['group'])
    hc.commit_snapshot(rdir, p['repo_id'], commit, p['requested_revision'] or commit, entries, {},
                       p['allow_patterns'], p['ignore_patterns'], uid, gid, hc.parse_mode(p['mode']))
    result['holder'] = True
    result['changed'] = True
    result['msg'] = '%s: %s@%s received from %s and verified against the hub\'s hashes (%d blobs, %s) in %.0f s, ' \
                    '%.0f s of it waiting for a source, in %d connection(s)%s' % (
                        p['host'], p['repo_id'], commit[:12], ', '.join(sorted(result['sources'])) or 'this host',
                        len(blobs), hc.human_bytes(result['bytes_total']), result['copy_s'], result['waited_s'],
                        result['connections'], describe(result))
    finish(module, result, prog, 'done')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type='str', required=True),
            revision=dict(type='str', required=True),
            requested_revision=dict(type='str'),
            files=dict(type='list', elements='dict', required=True),
            cache_dir=dict(type='path', required=True),
            host=dict(type='str', required=True),
            peers=dict(type='list', elements='str', required=True),
            addresses=dict(type='dict', required=True),
            roots=dict(type='list', elements='str', required=True),
            degree=dict(type='int', default=1),
            port=dict(type='int', default=8873),
            user=dict(type='str', default='inkling-fleet'),
            secret=dict(type='str', required=True, no_log=True),
            allow_patterns=dict(type='list', elements='str'),
            ignore_patterns=dict(type='list', elements='str'),
            owner=dict(type='str'),
            group=dict(type='str'),
            mode=dict(type='str', default='0644'),
            free_space_margin_pct=dict(type='int', default=hc.STAGING_MARGIN_PCT),
            progress_file=dict(type='path', required=True),
            pid_file=dict(type='path'),
            control_file=dict(type='path', required=True),
            control_id=dict(type='str', required=True),
            gave_up_file=dict(type='path'),
            relay_port=dict(type='int', default=0),
            poll_interval_s=dict(type='float', default=0.5),
            switch_after_s=dict(type='int', default=30),
            start_timeout_s=dict(type='int', default=120),
            retries=dict(type='int', default=3),
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
            module.fail_json(msg='%s: %s' % (pf.host_name(), exc), holder=False, reason='failed')
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
