# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The controller's decisions of the hf_cache peer fan-out (``hf_cache_source: peer``), as pure functions.

Each takes the ordered peer names and a state per host that takes part::

    {'holder': bool,            # holds a verified snapshot (its completion marker) now
     'is_seed': bool,           # picked to download from the hub
     'held_revision': str,      # the commit of the snapshot it held when the role started ('' if none)
     'planned_revision': str,   # the commit its hub plan resolved (seeds; '' otherwise)
     'run': str}                # the run id of its staging

The filter plugins in ``plugins/filter/hf_fanout.py`` build these states from ``hostvars``; the role's
task files only sequence. Which host copies from which (the doubling tree) is ``peer_tree`` and
``peer_sources`` in ``hf_cache.py``, decided by each receiver's ``hf_peer_copy`` job.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


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


def plan(peers, states):
    """Who serves and who copies, once the seeds planned against the hub.

    Returns ``{'peers', 'seeds', 'holders', 'commit', 'roots', 'receivers', 'run'}``:

    - ``commit``: what every receiver copies: the first seed's resolved commit, else the commit the
      first holder holds, else '' (nothing to copy);
    - ``roots``: the hosts the tree grows from: the seeds and the holders of that commit;
    - ``receivers``: every other host taking part, holders of another commit included (they copy);
    - ``run``: one id shared by the hosts of this staging (the first peer's), naming the files
      by which a receiver that gave up tells the others.
    """
    peers = _taking_part(peers, states)
    seeds = [p for p in peers if states[p].get('is_seed')]
    holders = [p for p in peers if states[p].get('holder')]
    commit = next((states[s]['planned_revision'] for s in seeds if states[s].get('planned_revision')), '')
    if not commit:
        commit = next((states[h]['held_revision'] for h in holders if states[h].get('held_revision')), '')
    roots = seeds + [h for h in holders if h not in seeds and commit and states[h].get('held_revision') == commit]
    return {
        'peers': peers,
        'seeds': seeds,
        'holders': holders,
        'commit': commit,
        'roots': roots,
        'receivers': [p for p in peers if p not in roots],
        'run': (states[peers[0]].get('run') or '') if peers else '',
    }


def failures(fanout, alive, states):
    """What the waiting copies must be told once the seeds' downloads ended.

    ``fanout`` is what ``plan`` returned, ``alive`` the hosts still in the play, ``states`` the hosts'
    states now. A peer is dead when it left the play (it failed) or when it is a seed that ended its
    download without a verified snapshot (a block around the role may have rescued it, so it is still
    in the play). The copies give up (``abort``) when no root holds the snapshot any more: no peer can
    ever get it then, and they stage from the hub. A copy that gives up later tells the others itself
    (``hf_peer_copy`` writes a file its rsync daemon serves).

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
