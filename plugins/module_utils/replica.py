# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Multi-node replicas from the inventory, and restart batches whose unit is a replica.

A replica is the set of hosts that serve one model copy together (a multi-node variant,
``nodes_per_replica`` > 1). The inventory forms them with host variables:

* ``inkling_replica``: the replica's name, the same on each member; unset or empty: the host is
  a replica of its own;
* ``inkling_replica_role: head`` on at most one member: the head (serves the API, holds the
  rendezvous); otherwise the first member in inventory order;
* ``inkling_replica_address``: the address the other members reach the head on (default: the
  head's ``ansible_host``, else its inventory name);
* ``inkling_replica_port``: the head's rendezvous port (default 29550, vLLM's
  ``--data-parallel-rpc-port`` default).

Pure functions, unit-tested in tests/unit/plugins/module_utils/test_replica.py.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math

DEFAULT_PORT = 29550


class ReplicaError(ValueError):
    """The inventory's replicas are inconsistent (every problem in ``errors``)."""

    def __init__(self, errors):
        self.errors = list(errors)
        super(ReplicaError, self).__init__('; '.join(self.errors))


def _get(hostvars, host, key, default=None):
    try:
        value = hostvars[host].get(key, default)
    except (KeyError, AttributeError):
        return default
    return default if value in (None, '') else value


def replicas(host_order, hostvars):
    """name -> {'name', 'members' (head first, then inventory order), 'head', 'head_address',
    'port'} for every replica the inventory names. Raises ReplicaError for two heads, a role
    other than head/worker, or members that disagree on the port."""
    groups = {}
    errors = []
    for host in host_order:
        name = _get(hostvars, host, 'inkling_replica')
        if name is None:
            continue
        groups.setdefault(str(name), []).append(host)
    out = {}
    for name, members in groups.items():
        roles = dict((h, str(_get(hostvars, h, 'inkling_replica_role', 'worker'))) for h in members)
        bad = sorted(h for h, r in roles.items() if r not in ('head', 'worker'))
        for host in bad:
            errors.append('%s: inkling_replica_role is %r; expected head or worker (or unset). Remedy: set it to '
                          'head on one member of replica %s' % (host, roles[host], name))
        heads = [h for h in members if roles[h] == 'head']
        if len(heads) > 1:
            errors.append('replica %s has %d heads (%s); expected one. Remedy: set inkling_replica_role: head on '
                          'one member only' % (name, len(heads), ', '.join(heads)))
        head = heads[0] if heads else members[0]
        ordered = [head] + [h for h in members if h != head]
        ports = sorted(set(int(_get(hostvars, h, 'inkling_replica_port', DEFAULT_PORT)) for h in members))
        if len(ports) > 1:
            errors.append('replica %s: its members set inkling_replica_port to %s; expected one port. Remedy: set '
                          'it once for the replica (group_vars)' % (name, ', '.join(str(p) for p in ports)))
        address = _get(hostvars, head, 'inkling_replica_address') or _get(hostvars, head, 'ansible_host') or head
        out[name] = {'name': name, 'members': ordered, 'head': head, 'head_address': str(address),
                     'port': ports[0]}
    if errors:
        raise ReplicaError(errors)
    return out


def replica_of(host, host_order, hostvars):
    """The replica ``host`` belongs to (see ``replicas``), or None when it serves alone."""
    for rep in replicas(host_order, hostvars).values():
        if host in rep['members']:
            return rep
    return None


def table(host_order, hostvars):
    """Every replica of the inventory, read once for the whole play (each host's variables at most once):
    ``{'replicas': name -> replica (see ``replicas``), 'of': member -> replica name, 'errors': [...]}``.
    Inconsistent replicas are not raised here but listed in ``errors``: ``lookup`` raises them for a host
    that asks, as ``replica_of`` does."""
    seen = {}

    class _Once(object):
        """hostvars, each host's variables fetched once (a fetch evaluates all of that host's variables)."""

        def __getitem__(self, host):
            if host not in seen:
                seen[host] = hostvars[host]
            return seen[host]

    try:
        found = replicas(host_order, _Once())
    except ReplicaError as e:
        return {'replicas': {}, 'of': {}, 'errors': e.errors}
    of = dict((member, name) for name, rep in found.items() for member in rep['members'])
    return {'replicas': found, 'of': of, 'errors': []}


def lookup(replica_table, host):
    """The replica ``host`` belongs to in a ``table``, or None; raises ReplicaError when the inventory's
    replicas are inconsistent. None without a table (a role's defaults templated before the play read it)."""
    if not replica_table:
        return None
    if replica_table.get('errors'):
        raise ReplicaError(replica_table['errors'])
    name = (replica_table.get('of') or {}).get(host)
    return (replica_table.get('replicas') or {}).get(name) if name is not None else None


def units(hosts, replica_map):
    """The rollout's units in host order: each replica once (at its first member in ``hosts``),
    listing its members that are in ``hosts`` (head first); every other host is a unit alone.
    ``replica_map``: host -> replica name (hosts without one are absent)."""
    seen = {}
    out = []
    for host in hosts:
        name = (replica_map or {}).get(host)
        if not name:
            out.append({'name': host, 'hosts': [host]})
        elif name in seen:
            seen[name]['hosts'].append(host)
        else:
            seen[name] = {'name': name, 'hosts': [host]}
            out.append(seen[name])
    return out


def _size(spec, total):
    text = str(spec).strip()
    if text.endswith('%'):
        return max(1, int(math.floor(float(text[:-1]) / 100.0 * total)))
    return max(1, int(text))


def batches(hosts, replica_map, serial, heads=None, keys=None):
    """Restart batches of whole replicas, Ansible's ``serial`` semantics in replicas: ``serial``
    is a number, a percentage or a list of them (the last repeats); percentages are of the
    replicas; a batch never splits a replica. Returns (order, sizes): the hosts in batch order
    (members of a replica side by side, head first when ``heads`` names it) and the batch sizes
    in hosts, ready for a play's ``hosts`` and ``serial``.

    ``keys`` (host -> variant): when the first batch is one replica (a canary), the first batch
    holds the first replica of each variant instead (one canary per variant, restarted side by
    side), so that no second host of a variant stops before that variant's canary passed its
    gate and analysis; the other batches follow from ``serial``'s second entry on. One variant:
    the same as without."""
    unit_list = units(hosts, replica_map)
    heads = heads or {}
    for unit in unit_list:
        head = heads.get(unit['name'])
        if head in unit['hosts']:
            unit['hosts'] = [head] + [h for h in unit['hosts'] if h != head]
    specs = serial if isinstance(serial, (list, tuple)) else [serial]
    specs = list(specs) or [1]
    total = len(unit_list)
    order, sizes = [], []
    position = 0
    step = 0
    if keys and total and _size(specs[0], total) == 1:
        canaries, seen = [], set()
        for unit in unit_list:
            key = keys.get(unit['hosts'][0])
            if key not in seen:
                seen.add(key)
                canaries.append(unit)
        order.extend(h for unit in canaries for h in unit['hosts'])
        sizes.append(len(order))
        unit_list = [u for u in unit_list if u not in canaries]
        step = 1
    while position < len(unit_list):
        count = _size(specs[min(step, len(specs) - 1)], total)
        chunk = unit_list[position:position + count]
        hosts_in = [h for unit in chunk for h in unit['hosts']]
        order.extend(hosts_in)
        sizes.append(len(hosts_in))
        position += count
        step += 1
    return order, sizes


def gate_problems(members, results):
    """Why a replica did not pass its gate as a whole (empty: it did). ``members``: head first.
    ``results``: member -> {'gate': the head's registered inkling.fleet.vllm_gate result (or
    None), 'state': a worker's ``systemctl show --property=ActiveState,NRestarts`` output (or
    None), 'baseline': the worker's NRestarts before the restart}. A member without a result did
    not get this far in the run (it failed or ended before)."""
    problems = []
    head = members[0]
    gate = (results.get(head) or {}).get('gate')
    if not gate:
        problems.append('the head %s did not reach its gate' % head)
    elif gate.get('failed'):
        problems.append('the head %s failed its gate: %s' % (head, gate.get('msg') or 'no message'))
    for worker in members[1:]:
        res = results.get(worker) or {}
        state = res.get('state')
        if state is None:
            problems.append('the worker %s did not get as far as its restart' % worker)
            continue
        fields = dict(line.split('=', 1) for line in str(state).splitlines() if '=' in line)
        active = fields.get('ActiveState', 'unknown')
        try:
            restarts = int(fields.get('NRestarts') or 0) - int(res.get('baseline') or 0)
        except ValueError:
            restarts = 0
        if active != 'active':
            problems.append('the worker %s is %s' % (worker, active))
        elif restarts > 0:
            problems.append('the worker %s restarted %d time(s) since its restart (it crashed)' % (worker, restarts))
    return problems


def probe(address, port, timeout_s=3.0):
    """Can this host reach ``address:port``? 'open' (something listens), 'refused' (the host
    answered: reachable, nothing listens yet), 'timeout' (filtered or down), 'unresolved', or
    'unreachable' (no route)."""
    import errno
    import socket
    try:
        infos = socket.getaddrinfo(address, port, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return 'unresolved'
    family, kind, proto, _name, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.settimeout(timeout_s)
    try:
        sock.connect(sockaddr)
        return 'open'
    except socket.timeout:
        return 'timeout'
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            return 'refused'
        return 'unreachable'
    finally:
        sock.close()


def rendezvous_check(host, replica, outcome, result):
    """The preflight check ``replica.rendezvous``: a worker reaches its head's rendezvous port.
    ``outcome``: probe()'s answer on a worker (None on the head). ``result``: preflight_checks.result."""
    where = '%s:%s' % (replica['head_address'], replica['port'])
    if replica.get('role') == 'head':
        return result('replica.rendezvous', True, 'head of replica %s, rendezvous on port %s'
                      % (replica['name'], replica['port']), 'the head holds the rendezvous')
    ok = outcome in ('open', 'refused')
    words = {'open': 'reachable (listening)', 'refused': 'reachable (nothing listens yet)',
             'timeout': 'no answer within the timeout (filtered or down)', 'unresolved': 'the name does not resolve',
             'unreachable': 'no route'}.get(outcome, str(outcome))
    return result('replica.rendezvous', ok, '%s: %s' % (where, words), 'the head %s reachable on port %s'
                  % (replica['head'], replica['port']),
                  remedy='open TCP port %s from %s to %s (firewall, security group), or set inkling_replica_address '
                         'to an address of %s that %s reaches'
                         % (replica['port'], host, replica['head'], replica['head'], host))


def rdma_check(replica, devices, path, required, result):
    """The preflight check ``replica.fabric``: InfiniBand/RoCE devices for the inter-node traffic
    (the expert all-to-all); a warning instead of an error when not ``required``."""
    ok = bool(devices)
    found = ('%d RDMA device(s) in %s: %s' % (len(devices), path, ', '.join(sorted(devices))) if ok
             else 'no RDMA device in %s' % path)
    return result('replica.fabric', ok, found, 'InfiniBand or RoCE devices for the traffic between the hosts of '
                  'replica %s' % replica['name'], level='error' if required else 'warning',
                  remedy='install the NIC driver and rdma-core (ibv_devices must list the devices) so that NCCL '
                         'uses them; over plain TCP the replica is far slower (preflight_replica_rdma_required: '
                         'false accepts that)')
