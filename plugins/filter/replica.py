# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters for multi-node replicas (plugins/module_utils/replica.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.module_utils import replica as rep


def replica_of(host_order, hostvars, host):
    try:
        return rep.replica_of(host, list(host_order), hostvars)
    except rep.ReplicaError as e:
        raise AnsibleFilterError(str(e))


def replica_with_gpus(replica, hostvars, fact='__preflight_gpu_info'):
    if not replica:
        return None
    gpus = {}
    for member in replica['members']:
        try:
            gpus[member] = (hostvars[member].get(fact) or {}).get('nvidia_gpu')
        except (KeyError, AttributeError):
            gpus[member] = None
    out = dict(replica)
    out['gpus'] = gpus
    return out


def rollout_plan(hosts, hostvars, key, default):
    """``hosts`` or ``serial`` of the restart play from the plan play 1 published as
    ``rollout_batch_plan`` (the first host of ``hosts`` that has it), else ``default``."""
    for host in hosts or []:
        try:
            plan = hostvars[host].get('rollout_batch_plan')
        except (KeyError, AttributeError):
            plan = None
        if plan:
            return plan[key]
    return default


def replica_batches(hosts, hostvars, serial, fact='rollout_deployment', per_variant=False):
    """(order, sizes) of rep.batches from the hosts' deployment contracts (their ``fact``);
    ``per_variant``: a first batch of one canary per variant (rep.batches ``keys``)."""
    replica_map, heads, keys = {}, {}, {}
    for host in hosts:
        try:
            contract = hostvars[host].get(fact)
        except (KeyError, AttributeError):
            contract = None
        keys[host] = (contract or {}).get('variant')
        info = ((contract or {}).get('entry') or {}).get('replica') or {}
        if info.get('name'):
            replica_map[host] = info['name']
            heads[info['name']] = info.get('head')
    order, sizes = rep.batches(list(hosts), replica_map, serial, heads, keys if per_variant else None)
    return {'hosts': order, 'serial': sizes}


def _fact(hostvars, host, fact):
    try:
        return hostvars[host].get(fact)
    except (KeyError, AttributeError):
        return None


def replica_partners_with(members, hostvars, host, fact):
    """The members other than ``host`` whose ``fact`` is set and not empty."""
    return [m for m in members or [] if m != host and _fact(hostvars, m, fact)]


def replica_partners_without(members, hostvars, host, fact):
    """The members other than ``host`` whose ``fact`` is not set (or empty)."""
    return [m for m in members or [] if m != host and not _fact(hostvars, m, fact)]


def replica_gate_problems(members, hostvars, gate_fact='__rollout_gate', state_fact='__rollout_member_state',
                          baseline_fact='__rollout_nrestarts'):
    """rep.gate_problems from the members' registered results."""
    results = {}
    for member in members or []:
        state = _fact(hostvars, member, state_fact) or {}
        baseline = _fact(hostvars, member, baseline_fact) or {}
        results[member] = {'gate': _fact(hostvars, member, gate_fact),
                           'state': state.get('stdout') if not state.get('skipped') else None,
                           'baseline': (baseline.get('stdout') or '0').strip() or '0'}
    return rep.gate_problems(list(members or []), results)


class FilterModule(object):
    def filters(self):
        return {'replica_of': replica_of, 'replica_with_gpus': replica_with_gpus, 'rollout_plan': rollout_plan,
                'replica_batches': replica_batches, 'replica_partners_with': replica_partners_with,
                'replica_partners_without': replica_partners_without, 'replica_gate_problems': replica_gate_problems}
