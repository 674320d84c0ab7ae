# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters for multi-node replicas (plugins/module_utils/replica.py).

The fleet-wide ones (replica_table, replica_batches, rollout_plan) read each host's variables at most once
and are called once for the play (run_once, a play keyword); the per-host ones take the values they decide
on as arguments, the role's own facts of the replica's members, and read no host's variables."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.module_utils import replica as rep


def replica_of(host_order, hostvars, host):
    """The replica of ``host``, reading every host's variables: for one host, or once on the controller;
    a role default evaluated on every host uses replica_table once and replica_lookup per host."""
    try:
        return rep.replica_of(host, list(host_order), hostvars)
    except rep.ReplicaError as e:
        raise AnsibleFilterError(str(e))


def replica_table(host_order, hostvars):
    """Every replica of the inventory, each host's variables read once: compute it once for the play
    (run_once) and look each host up in it with replica_lookup."""
    return rep.table(list(host_order), hostvars)


def replica_lookup(table, host):
    try:
        return rep.lookup(table, host)
    except rep.ReplicaError as e:
        raise AnsibleFilterError(str(e))


def replica_with_gpus(replica, results):
    """The replica with ``gpus``: member -> the nvidia_gpu facts of its registered nvidia_gpu_info result,
    ``results`` in the order of the members (the role passes them; this filter reads no host's variables)."""
    if not replica:
        return None
    results = list(results or [])
    gpus = {}
    for i, member in enumerate(replica['members']):
        result = results[i] if i < len(results) else None
        gpus[member] = result.get('nvidia_gpu') if isinstance(result, Mapping) else None
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


def _values(members, values):
    """member -> its value, ``values`` in the order of ``members`` (a missing one is None)."""
    values = list(values or [])
    return dict((m, values[i] if i < len(values) else None) for i, m in enumerate(members or []))


def replica_partners_with(members, host, values):
    """The members other than ``host`` whose value (``values``, in the order of ``members``) is set and not empty."""
    by_member = _values(members, values)
    return [m for m in members or [] if m != host and by_member[m]]


def replica_partners_without(members, host, values):
    """The members other than ``host`` whose value (``values``, in the order of ``members``) is not set (or empty)."""
    by_member = _values(members, values)
    return [m for m in members or [] if m != host and not by_member[m]]


def replica_gate_problems(members, gates, states, baselines):
    """rep.gate_problems from the members' registered results, each list in the order of ``members``:
    the gate result, the worker's unit state (systemctl show), its start (inkling.fleet.unit_run: ``nrestarts``, the
    NRestarts read before the start)."""
    gates, states, baselines = _values(members, gates), _values(members, states), _values(members, baselines)
    results = {}
    for member in members or []:
        state = states[member] or {}
        baseline = baselines[member] or {}
        results[member] = {'gate': gates[member],
                           'state': state.get('stdout') if not state.get('skipped') else None,
                           'baseline': baseline.get('nrestarts') or 0}
    return rep.gate_problems(list(members or []), results)


class FilterModule(object):
    def filters(self):
        return {'replica_of': replica_of, 'replica_table': replica_table, 'replica_lookup': replica_lookup,
                'replica_with_gpus': replica_with_gpus, 'rollout_plan': rollout_plan,
                'replica_batches': replica_batches, 'replica_partners_with': replica_partners_with,
                'replica_partners_without': replica_partners_without, 'replica_gate_problems': replica_gate_problems}
