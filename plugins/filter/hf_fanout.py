# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the hf_cache peer fan-out: the hosts' states read from the fact each host publishes
(``hf_cache_peer_state``, documented in roles/hf_cache/meta/argument_specs.yml), the decisions made by
the pure functions of ``plugins/module_utils/hf_fanout.py`` (documented in hf_peer_seeds.yml,
hf_peer_plan.yml and hf_peer_failures.yml beside this file).

Each filter reads a host's variables at most once per call (``hostvars[name]`` is a full evaluation of
that host's variables), and only of the hosts its decision needs; the role calls each filter once per
play (``run_once``), so that a play of N hosts reads O(N) host variables in all, not O(N) per host."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout

# The fact the role publishes on each host taking part (roles/hf_cache/tasks/stage_peer.yml):
# {'run', 'holder', 'held_revision', 'address'}; a host without it does not take part.
STATE = 'hf_cache_peer_state'


def _bool(value):
    if isinstance(value, str):
        return value.strip().lower() in ('true', 'yes', 'on', '1')
    return bool(value)


def peer_states(names, hostvars, play_hosts, seeds=None):
    """{name: state} of the hosts among ``names`` that are in ``play_hosts`` and published ``STATE``,
    each host's variables read once. ``seeds``: {seed: the commit its own hub plan resolved}."""
    play_hosts = set(play_hosts)
    seeds = seeds or {}
    states = {}
    for name in names:
        if name in states or name not in play_hosts or name not in hostvars:
            continue
        host = hostvars[name]
        if STATE not in host:
            continue
        state = host[STATE] or {}
        states[name] = {
            'holder': _bool(state.get('holder', False)),
            'is_seed': name in seeds,
            'held_revision': state.get('held_revision') or '',
            'planned_revision': (seeds.get(name) or '') if name in seeds else '',
            'run': state.get('run') or '',
            'address': state.get('address') or '',
        }
    return states


def hf_peer_seeds(peer_hosts, hostvars, play_hosts, count):
    return hf_fanout.pick_seeds(list(peer_hosts), peer_states(peer_hosts, hostvars, play_hosts), count)


def hf_peer_plan(peer_hosts, hostvars, play_hosts, commit='', seeds=None):
    states = peer_states(peer_hosts, hostvars, play_hosts, dict(seeds or {}))
    out = hf_fanout.plan(list(peer_hosts), states, commit)
    out.update(hf_fanout.addresses(out['peers'], states))
    return out


def hf_peer_failures(fanout, hostvars, play_hosts):
    seeds = list(fanout.get('seeds') or [])
    peers = set(fanout.get('peers') or [])
    # only the seeds' and the roots' states decide; a host that left the play has none (failures() counts it as dead)
    read = [p for p in seeds + list(fanout.get('roots') or []) if p in peers]
    states = peer_states(read, hostvars, play_hosts, dict((s, '') for s in seeds))
    return hf_fanout.failures(fanout, play_hosts, states)


class FilterModule(object):
    def filters(self):
        return {
            'hf_peer_seeds': hf_peer_seeds,
            'hf_peer_plan': hf_peer_plan,
            'hf_peer_failures': hf_peer_failures,
        }
