# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The controller's decisions of the hf_cache peer fan-out (``hf_cache_source: peer``), as pure functions.

Each takes the ordered peer names and a state per host that takes part::

    {'holder': bool,            # holds a verified snapshot (its completion marker) now
     'is_seed': bool,           # picked to download from the hub
     'held_revision': str,      # the commit of the snapshot it held when the role started ('' if none)
     'planned_revision': str,   # the commit its hub plan resolved (seeds; '' otherwise)
     'run': str,                # the run id of its staging
     'address': str}            # its address on the fleet network (``addresses`` only)

The commit to copy is never a peer's: the controller asks the hub (``hub_commit``, ``hub_files``) and
``plan`` takes its answer. The filter plugins in ``plugins/filter/hf_fanout.py`` build these states from
the fact each host publishes (``hf_cache_peer_state``), reading each host's variables once per call, and
from the seeds the controller picked; the role calls each filter once per play (``run_once``), never per
host, and every host looks its part up in that one result (docs/hf-cache.md). The role's task files
only sequence. Which host takes each file from which (the relay) is ``relay_parents`` and
``relay_sources`` below, used by each receiver's ``hf_peer_copy`` job; ``schedule`` models its completion time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


def _taking_part(peers, states):
    seen, out = set(), []
    for name in peers:
        if name in states and name not in seen:
            seen.add(name)
            out.append(name)
    return out


def pick_seeds(peers, states, count):
    """The hosts that download from the hub: the first ``count`` peers taking part, and none when
    any of them holds a verified snapshot already (the others copy from it)."""
    peers = _taking_part(peers, states)
    if any(states[p].get('holder') for p in peers):
        return []
    return peers[:max(int(count), 0)]


def plan(peers, states, commit=''):
    """Who serves and who copies, once the controller asked the hub for the commit (and the seeds planned).

    Returns ``{'peers', 'seeds', 'holders', 'commit', 'roots', 'receivers', 'run'}``:

    - ``commit``: what every receiver copies: the ``commit`` the controller's hub answer named for the
      configured revision (plugin hf_hub_files), never what a peer reports; '' when the controller did not
      ask (check mode, or every host holds the snapshot): then nothing is copied;
    - ``roots``: the hosts the tree grows from: the seeds whose own hub plan resolved that commit and the
      holders of that commit (what a peer reports only decides whom to ask; receivers check every byte
      against the controller's file list);
    - ``receivers``: every other host taking part, holders of another commit included (they copy);
    - ``run``: one id shared by the hosts of this staging (the first peer's), naming the files
      by which a receiver that gave up tells the others.
    """
    peers = _taking_part(peers, states)
    seeds = [p for p in peers if states[p].get('is_seed')]
    holders = [p for p in peers if states[p].get('holder')]
    commit = commit or ''
    roots = [s for s in seeds if commit and states[s].get('planned_revision') == commit]
    roots += [h for h in holders if h not in roots and commit and states[h].get('held_revision') == commit]
    return {
        'peers': peers,
        'seeds': seeds,
        'holders': holders,
        'commit': commit,
        'roots': roots,
        'receivers': [p for p in peers if p not in roots],
        'run': (states[peers[0]].get('run') or '') if peers else '',
    }


def addresses(peers, states):
    """The peers' addresses, decided once with the plan: ``{'addresses': {peer: address ('' when it has none)},
    'allow': [the non-empty addresses, in the peers' order]}``; ``addresses`` is what every receiver's copy job
    connects to, ``allow`` what every daemon and relay answers (``hosts allow``)."""
    found = [(p, str((states.get(p) or {}).get('address') or '')) for p in peers]
    return {'addresses': dict(found), 'allow': [a for dummy, a in found if a]}


def failures(fanout, alive, states):
    """What the waiting copies must be told once the seeds' downloads ended.

    ``fanout`` is what ``plan`` returned, ``alive`` the hosts still in the play, ``states`` the hosts'
    states now (only the seeds' and the roots' states are read). A peer is dead when it left the play (it
    failed) or when it is a seed that ended its download without a verified snapshot (a block around the
    role may have rescued it, so it is still in the play). The copies give up (``abort``) when no root
    holds the snapshot any more: no peer can ever get it then, and they stage from the hub. A copy that
    gives up later tells the others itself (``hf_peer_copy`` writes a file its rsync daemon serves).

    Returns ``{'dead', 'abort', 'reason'}``.
    """
    alive = set(alive)
    peers = fanout.get('peers') or []
    dead = [p for p in peers if p not in alive]
    dead += [p for p in peers if p in alive and (states.get(p) or {}).get('is_seed')
             and not (states.get(p) or {}).get('holder')]
    holding = [r for r in fanout.get('roots') or [] if r in alive and (states.get(r) or {}).get('holder')]
    abort = not holding
    if abort:
        reason = 'no host holds a verified snapshot any more (%s failed)' % (', '.join(dead) or 'every root')
    else:
        reason = '%s failed' % ', '.join(dead) if dead else ''
    return {'dead': dead, 'abort': abort, 'reason': reason}


# --------------------------------------------------------------------------
# the relay: who passes each file to whom (chain or tree), and the schedule model
# --------------------------------------------------------------------------

def relay_parents(peers, roots, degree=1):
    """{receiver: parent} of the pipelined relay.

    The receivers (``peers`` not in ``roots``, in order) are dealt round-robin to one relay per root;
    within a relay the root is position 0 and position ``i`` copies from position ``(i - 1) // degree``:
    ``degree`` 1 is a chain (every host passes each file on to exactly one other host), 2 a binary tree.
    Each receiver takes every file from its parent as soon as the parent verified it, while the rest
    is still arriving: the relay is pipelined per file. Empty without a root.
    """
    roots = [r for r in peers if r in roots]
    if not roots:
        return {}
    degree = max(int(degree), 1)
    receivers = [p for p in peers if p not in roots]
    relays = [[r] for r in roots]
    for i, name in enumerate(receivers):
        relays[i % len(relays)].append(name)
    parent = {}
    for relay in relays:
        for pos in range(1, len(relay)):
            parent[relay[pos]] = relay[(pos - 1) // degree]
    return parent


def relay_sources(host, peers, roots, degree=1):
    """Where ``host`` takes files from, in order of preference: its parent in the relay, the parent's
    ancestors up to the root (a dead or slow parent is skipped for them), then every other peer, the
    roots first, then the hosts ahead of ``host``, then those behind it. After the last one, the hub."""
    parent = relay_parents(peers, roots, degree)
    chain, cur = [], host
    while cur in parent and parent[cur] not in chain and parent[cur] != host:
        cur = parent[cur]
        chain.append(cur)
    i = peers.index(host) if host in peers else 0
    rest = [p for p in peers if p != host and p not in chain]
    rest = [p for p in rest if p in roots] + [p for p in peers[:i] if p in rest and p not in roots] \
        + [p for p in peers[i + 1:] if p in rest and p not in roots]
    return chain + rest


def schedule(hosts, sizes, rate_bps, degree=1, hub_rate_bps=None, per_file_s=0.0, per_hop_s=0.0, roots=1,
             per_connection_s=0.0, piece_bytes=0):
    """Predicted completion of a pipelined relay (store and forward per file, or per piece), in seconds.

    ``hosts`` hosts (the roots included), the files' ``sizes`` in bytes in the order they are relayed,
    every host's link ``rate_bps`` bits/s (full duplex, equal), the hub's link ``hub_rate_bps`` (default
    the same). A root takes file j from the hub after file j-1; a receiver takes file j from its parent
    once the parent holds it and it holds file j-1; a parent in a tree of ``degree`` sends to its children
    at once, each at ``rate / children``. ``per_file_s`` is the fixed cost of one file (its rename, the end of
    its hash), ``per_hop_s`` the delay before a receiver sees that its parent holds a file (its polling), and
    ``per_connection_s`` the fixed cost of one rsync connection of a receiver (connect, authenticate, file
    list): a receiver takes, in one connection, every file its parent holds when it asks (``hf_peer_copy``'s
    batch), so a receiver that fell behind its parent pays it once for all the files it catches up on, and one
    that keeps up pays it once per file.

    With ``piece_bytes`` (the relay of hf_peer_relay), a receiver takes file j while its parent still receives
    it, one connection per file: it ends file j no sooner than its own link allows after file j-1 and no sooner
    than one piece (and ``per_hop_s``) after its parent ended it. A chain of N hosts relaying F equal files then
    takes about T1 + (N - 1) x (piece time + per_hop_s), whatever the size of the files.

    Returns ``{'host_s': [completion of each host, in relay order], 'makespan_s', 't1_s', 'ratio'}`` where
    ``t1_s`` is one host's transfer from the hub alone and ``ratio`` = makespan / t1. For F equal files on
    a chain without fixed costs, the makespan is T1 x (1 + (N - 1) / F).
    """
    hosts = int(hosts)
    roots = max(min(int(roots), hosts), 1)
    rate = float(rate_bps) / 8.0
    hub = float(hub_rate_bps or rate_bps) / 8.0
    names = list(range(hosts))
    parent = relay_parents(names, names[:roots], degree)
    children = {}
    for child, par in parent.items():
        children.setdefault(par, []).append(child)
    sizes = [int(s) for s in sizes]
    done = {}
    # roots from the hub (sharing the hub's link when there are several)
    for r in names[:roots]:
        t, out = 0.0, []
        for s in sizes:
            t += s * roots / hub + per_file_s
            out.append(t)
        done[r] = out
    # receivers in relay order: a parent's times are known before its children's
    for h in names[roots:]:
        par = parent[h]
        share = len(children.get(par, [])) or 1
        t, out, j = 0.0, [], 0
        if piece_bytes:
            for j, s in enumerate(sizes):
                t = max(t + per_connection_s + s * share / rate,
                        done[par][j] + min(piece_bytes, s) * share / rate + per_hop_s) + per_file_s
                out.append(t)
            j = len(sizes)
        while j < len(sizes):
            start = max(t, done[par][j] + per_hop_s)
            # one connection: every file from j on the parent holds by then (it holds them in relay order)
            k = j + 1
            while k < len(sizes) and done[par][k] + per_hop_s <= start:
                k += 1
            t = start + per_connection_s
            for s in sizes[j:k]:
                t += s * share / rate + per_file_s
                out.append(t)
            j = k
        done[h] = out
    finish = [done[h][-1] if sizes else 0.0 for h in names]
    t1 = sum(sizes) / hub + per_file_s * len(sizes)
    makespan = max(finish) if finish else 0.0
    return {'host_s': finish, 'makespan_s': makespan, 't1_s': t1, 'ratio': makespan / t1 if t1 else 0.0}


def best_degree(hosts, sizes, rate_bps, degrees=(1, 2, 3, 4), **kw):
    """The relay degree with the smallest predicted makespan (a chain on a tie), and every prediction."""
    preds = dict((d, schedule(hosts, sizes, rate_bps, degree=d, **kw)['makespan_s']) for d in degrees)
    return min(sorted(preds), key=lambda d: (round(preds[d], 6), d)), preds


# --------------------------------------------------------------------------
# the hub's file list, fetched once by the controller (action plugin hf_hub_files)
# --------------------------------------------------------------------------

COMMIT_RE = re.compile(r'^[0-9a-f]{40}$')


def hub_commit(info, revision):
    """``(commit, error)``: the commit the hub's answer for ``revision`` (a branch, tag or commit) names.
    For a commit the answer must be that commit; for a branch or tag it is whatever the hub says now."""
    if not isinstance(info, dict):
        return None, 'the hub answered %s, not a model description' % type(info).__name__
    sha = info.get('sha')
    if not (isinstance(sha, str) and COMMIT_RE.match(sha)):
        return None, 'the hub names no commit (sha %r) for revision %r' % (sha, revision)
    if COMMIT_RE.match(revision or '') and sha != revision:
        return None, 'the hub describes commit %r, not %s' % (sha, revision)
    return sha, None


def hub_files(info, commit, allow_patterns=None, ignore_patterns=None):
    """The files of ``commit`` from the hub's model info (``GET /api/models/REPO/revision/COMMIT?blobs=true``):
    ``(files, error)``, files a list of ``{path, size, etag, lfs}`` (sha256 for LFS files, the git blob sha1
    otherwise), sorted by path, after the allow/ignore patterns. ``error`` names what is wrong (the hub answered
    for another commit, a file without size or hash) and files is then None."""
    from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc  # pylint: disable=import-outside-toplevel
    if not isinstance(info, dict):
        return None, 'the hub answered %s, not a model description' % type(info).__name__
    if info.get('sha') != commit:
        return None, 'the hub describes commit %r, not %s' % (info.get('sha'), commit)
    try:
        entries = hc.entries_from_siblings(info.get('siblings') or [])
    except (hc.HfCacheError, KeyError, TypeError, ValueError) as exc:
        return None, str(exc)
    entries = hc.filter_entries(entries, allow_patterns, ignore_patterns)
    if not entries:
        return None, 'no file of %s matches the allow/ignore patterns' % commit
    return [e.to_dict() for e in entries], None
