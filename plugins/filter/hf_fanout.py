# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the hf_cache peer fan-out: the hosts' states read from hostvars, the decisions made by the
pure functions of ``plugins/module_utils/hf_fanout.py`` (documented in hf_peer_seeds.yml, hf_peer_plan.yml
and hf_peer_failures.yml beside this file)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout

# The role's facts this reads (roles/hf_cache/tasks/stage_peer.yml and peer_*.yml set them).
TAKING_PART = '__hf_cache_peer_run'


def _get(hostvars, name, key, default=None):
    value = hostvars[name].get(key, default)
    return default if value is None else value


def peer_states(names, hostvars, play_hosts):
    """{name: state} of the hosts among ``names`` that are in the play and run the peer staging."""
    play_hosts = set(play_hosts)
    states = {}
    for name in names:
        if name not in play_hosts or name not in hostvars or TAKING_PART not in hostvars[name]:
            continue
        states[name] = {
            'holder': bool(_get(hostvars, name, '__hf_cache_holder', False)),
            'is_seed': bool(_get(hostvars, name, '__hf_cache_is_seed', False)),
            'held_revision': _get(hostvars, name, '__hf_cache_local', {}).get('revision') or '',
            'planned_revision': _get(hostvars, name, '__hf_cache_plan', {}).get('revision') or '',
            'run': _get(hostvars, name, TAKING_PART, ''),
        }
    return states


def hf_peer_seeds(peer_hosts, hostvars, play_hosts, count):
    return hf_fanout.pick_seeds(list(peer_hosts), peer_states(peer_hosts, hostvars, play_hosts), count)


def hf_peer_plan(peer_hosts, hostvars, play_hosts, commit=''):
    return hf_fanout.plan(list(peer_hosts), peer_states(peer_hosts, hostvars, play_hosts), commit)


def hf_peer_failures(fanout, hostvars, play_hosts):
    peers = list(fanout.get('peers') or [])
    # a host that left the play has no state here; failures() counts it as dead
    return hf_fanout.failures(fanout, play_hosts, peer_states(peers, hostvars, peers))


class FilterModule(object):
    def filters(self):
        return {
            'hf_peer_seeds': hf_peer_seeds,
            'hf_peer_plan': hf_peer_plan,
            'hf_peer_failures': hf_peer_failures,
        }
