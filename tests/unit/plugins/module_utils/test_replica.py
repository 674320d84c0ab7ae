# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Replicas from the inventory and restart batches of whole replicas (module_utils/replica.py),
and the journal's replica accounting (module_utils/rollout.py)."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.filter import replica as flt
from ansible_collections.inkling.fleet.plugins.module_utils import replica as rep
from ansible_collections.inkling.fleet.plugins.module_utils import rollout as engine

ORDER = ['s1', 'h100-a', 's2', 'h100-b', 's3', 'h100-c', 'h100-d']


def inventory(**extra):
    hv = dict((h, {}) for h in ORDER)
    hv['h100-a'] = {'inkling_replica': 'r1', 'ansible_host': '10.0.0.1'}
    hv['h100-b'] = {'inkling_replica': 'r1', 'ansible_host': '10.0.0.2'}
    hv['h100-c'] = {'inkling_replica': 'r2', 'inkling_replica_port': 31000}
    hv['h100-d'] = {'inkling_replica': 'r2', 'inkling_replica_role': 'head', 'inkling_replica_port': 31000}
    for host, values in extra.items():
        hv[host].update(values)
    return hv


def test_replicas_follow_the_inventory_and_the_head_role():
    found = rep.replicas(ORDER, inventory())
    assert found['r1'] == {'name': 'r1', 'members': ['h100-a', 'h100-b'], 'head': 'h100-a',
                           'head_address': '10.0.0.1', 'port': 29550}
    assert found['r2']['members'] == ['h100-d', 'h100-c'] and found['r2']['head_address'] == 'h100-d'
    assert found['r2']['port'] == 31000
    assert rep.replica_of('s1', ORDER, inventory()) is None
    assert rep.replica_of('h100-b', ORDER, inventory())['name'] == 'r1'


def test_an_explicit_address_wins():
    found = rep.replicas(ORDER, inventory(**{'h100-a': {'inkling_replica_address': '192.168.7.1'}}))
    assert found['r1']['head_address'] == '192.168.7.1'


def test_inconsistent_replicas_are_refused_with_every_problem():
    hv = inventory(**{'h100-c': {'inkling_replica_role': 'head', 'inkling_replica_port': 29550},
                      'h100-a': {'inkling_replica_role': 'boss'}})
    with pytest.raises(rep.ReplicaError) as err:
        rep.replicas(ORDER, hv)
    text = str(err.value)
    assert "h100-a: inkling_replica_role is 'boss'" in text
    assert 'replica r2 has 2 heads (h100-c, h100-d)' in text
    assert 'replica r2: its members set inkling_replica_port to 29550, 31000' in text


REPLICAS = {'h100-a': 'r1', 'h100-b': 'r1', 'h100-c': 'r2', 'h100-d': 'r2'}


@pytest.mark.parametrize('serial, order, sizes', [
    (1, ['s1', 'h100-a', 'h100-b', 's2', 's3', 'h100-c', 'h100-d'], [1, 2, 1, 1, 2]),
    ([1, '50%'], ['s1', 'h100-a', 'h100-b', 's2', 's3', 'h100-c', 'h100-d'], [1, 3, 3]),
    (['100%'], ['s1', 'h100-a', 'h100-b', 's2', 's3', 'h100-c', 'h100-d'], [7]),
    ([2, 1], ['s1', 'h100-a', 'h100-b', 's2', 's3', 'h100-c', 'h100-d'], [3, 1, 1, 2]),
])
def test_batches_count_replicas_and_never_split_one(serial, order, sizes):
    got_order, got_sizes = rep.batches(ORDER, REPLICAS, serial)
    assert (got_order, got_sizes) == (order, sizes)
    # Every batch holds whole replicas.
    position = 0
    for size in got_sizes:
        batch = got_order[position:position + size]
        position += size
        for name in set(REPLICAS.get(h) for h in batch) - {None}:
            assert set(h for h, r in REPLICAS.items() if r == name) <= set(batch)


def test_batches_put_the_head_first():
    order, _sizes = rep.batches(ORDER, REPLICAS, 1, heads={'r2': 'h100-d'})
    assert order.index('h100-d') == order.index('h100-c') - 1


def contract(host, name=None, members=None):
    entry = {'name': 'sm90-h100-2node' if name else 'sm90-patched'}
    if name:
        entry['replica'] = {'name': name, 'members': members, 'head': members[0]}
    return {'host': host, 'variant': entry['name'], 'entry': entry, 'image': 'x', 'image_digest': None,
            'revision': 'main', 'served_model_name': 'inkling', 'vllm_args': [], 'env': {}}


def outcomes(failed=()):
    out = {'s1': {'contract': contract('s1')}}
    for host in ('h100-a', 'h100-b'):
        out[host] = {'contract': contract(host, 'r1', ['h100-a', 'h100-b'])}
    for host in failed:
        out[host] = {'failed': '%s: disk full' % host}
    return out


def test_a_member_failing_preflight_sets_the_whole_replica_aside_and_counts_once():
    journal, _a, _n = engine.open_run(None, outcomes(failed=['h100-b']), 'run1', 't0', max_failed=1)
    assert journal['hosts']['h100-a']['phase'] == 'excluded'
    assert 'replica r1 (h100-a, h100-b) is set aside as a whole: h100-b' in journal['hosts']['h100-a']['message']
    assert journal['hosts']['s1']['phase'] == 'pending'
    assert engine.failed_units(journal) == ['replica:r1']
    assert not journal['halted']      # two failed hosts, one failed replica: within a budget of 1


def test_members_that_both_fail_count_as_their_inventory_replica():
    out = outcomes(failed=['h100-a', 'h100-b'])
    out['h100-a']['replica'] = out['h100-b']['replica'] = 'r1'
    journal, _a, _n = engine.open_run(None, out, 'run1', 't0', max_failed=1)
    assert engine.failed_units(journal) == ['replica:r1'] and not journal['halted']


def test_the_budget_counts_replicas_and_lists_their_hosts():
    journal, _a, _n = engine.open_run(None, outcomes(failed=['h100-b']), 'run1', 't0', max_failed=0)
    assert journal['halt_reason'] == ('1 replica(s) failed (replica r1 (h100-a, h100-b)), over the fleet-wide budget '
                                      'of 0 (set aside by preflight: 2)')


def test_min_healthy_counts_replicas():
    journal, _a, _n = engine.open_run(None, outcomes(), 'run1', 't0', min_healthy=3)
    assert journal['halt_reason'].startswith('only 2 of 2 replicas passed preflight (none failed); '
                                             'rollout_min_healthy_hosts is 3 (it counts replicas')


def test_the_report_names_each_hosts_replica():
    journal, _a, _n = engine.open_run(None, outcomes(), 'run1', 't0')
    for host in ('s1', 'h100-a', 'h100-b'):
        engine.record(journal, host, 'staged', 't1')
        engine.record(journal, host, 'unchanged', 't2')
    journal = engine.close_run(journal, 't3')
    lines = engine.summary_lines(journal)
    assert any(line.startswith('h100-b (replica r1): unchanged') for line in lines)
    assert any(line.startswith('s1: unchanged') for line in lines)
    assert '| h100-a (replica r1) |' in engine.render_markdown(journal)


# --- preflight: rendezvous and fabric ------------------------------------------------------

from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc  # noqa: E402

WORKER = {'name': 'r1', 'role': 'worker', 'head': 'h100-a', 'head_address': '127.0.0.1', 'port': 0}


def test_probe_tells_refused_from_open():
    import socket
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    assert rep.probe('127.0.0.1', port, 1) == 'refused'      # bound, not listening
    sock.listen(1)
    assert rep.probe('127.0.0.1', port, 1) == 'open'
    sock.close()
    assert rep.probe('no-such-host.invalid', port, 1) == 'unresolved'


@pytest.mark.parametrize('outcome, ok', [('open', True), ('refused', True), ('timeout', False),
                                         ('unresolved', False), ('unreachable', False)])
def test_the_rendezvous_check_on_a_worker(outcome, ok):
    res = rep.rendezvous_check('h100-b', dict(WORKER, port=29550), outcome, pc.result)
    assert res['check'] == 'replica.rendezvous' and res['ok'] is ok
    if not ok:
        assert 'open TCP port 29550 from h100-b to h100-a' in res['remedy']


def test_the_fabric_check_fails_or_warns_without_rdma():
    assert rep.rdma_check(WORKER, ['mlx5_0', 'mlx5_1'], '/sys/class/infiniband', True, pc.result)['ok']
    failed = rep.rdma_check(WORKER, [], '/sys/class/infiniband', True, pc.result)
    assert not failed['ok'] and failed['level'] == 'error' and 'ibv_devices' in failed['remedy']
    assert rep.rdma_check(WORKER, [], '/x', False, pc.result)['level'] == 'warning'


# --- the replica's gate (rollout) -------------------------------------------------------

MEMBERS = ['h100-a', 'h100-b']


def gate_results(gate=None, state='ActiveState=active\nNRestarts=0', baseline='0'):
    return {'h100-a': {'gate': gate if gate is not None else {'failed': False}},
            'h100-b': {'state': state, 'baseline': baseline}}


def test_a_replica_passes_when_the_head_passed_and_the_worker_stayed_up():
    assert rep.gate_problems(MEMBERS, gate_results()) == []


@pytest.mark.parametrize('results, problem', [
    (gate_results(gate={'failed': True, 'msg': 'never answered /health'}),
     'the head h100-a failed its gate: never answered /health'),
    (gate_results(state='ActiveState=activating\nNRestarts=2'), 'the worker h100-b is activating'),
    (gate_results(state='ActiveState=active\nNRestarts=3', baseline='1'),
     'the worker h100-b restarted 2 time(s) since its restart (it crashed)'),
    ({'h100-a': {'gate': {'failed': False}}}, 'the worker h100-b did not get as far as its restart'),
    ({'h100-b': {'state': 'ActiveState=active\nNRestarts=0'}}, 'the head h100-a did not reach its gate'),
])
def test_any_member_failing_fails_the_replica(results, problem):
    assert rep.gate_problems(MEMBERS, results) == [problem]


class CountingHostvars(dict):
    """hostvars whose every ``hostvars[name]`` (a full evaluation of that host's variables in Ansible) is counted."""

    def __init__(self, *a, **kw):
        super(CountingHostvars, self).__init__(*a, **kw)
        self.reads = {}

    def __getitem__(self, name):
        self.reads[name] = self.reads.get(name, 0) + 1
        return dict.__getitem__(self, name)


def test_the_table_read_once_answers_what_replica_of_answers_on_every_host():
    hv = CountingHostvars(inventory())
    table = flt.replica_table(ORDER, hv)
    # each host's variables once, however many members a replica has
    assert sorted(hv.reads) == sorted(ORDER) and set(hv.reads.values()) == {1}
    for host in ORDER:
        assert flt.replica_lookup(table, host) == rep.replica_of(host, ORDER, inventory())
    assert table['of'] == {'h100-a': 'r1', 'h100-b': 'r1', 'h100-d': 'r2', 'h100-c': 'r2'}
    # before the role read the table (its defaults templated for argument validation): null
    assert flt.replica_lookup(None, 'h100-a') is None


def test_the_table_keeps_inconsistent_replicas_for_the_hosts_that_ask():
    bad = inventory(**{'h100-c': {'inkling_replica_role': 'head', 'inkling_replica_port': 29550}})
    table = flt.replica_table(ORDER, bad)            # no failure for the whole play here
    assert 'replica r2 has 2 heads (h100-c, h100-d)' in table['errors'][0]
    with pytest.raises(AnsibleFilterError, match='replica r2 has 2 heads'):
        flt.replica_lookup(table, 'h100-a')
    with pytest.raises(AnsibleFilterError, match='replica r2 has 2 heads'):
        flt.replica_of(ORDER, bad, 'h100-a')         # as before


def test_the_per_host_filters_take_the_members_values_and_read_no_host():
    members = ['h100-a', 'h100-b', 'h100-c']
    assert flt.replica_partners_with(members, 'h100-a', [['unit changed'], [], ['not active']]) == ['h100-c']
    assert flt.replica_partners_with(members, 'h100-c', [['unit changed'], None, ['x']]) == ['h100-a']
    assert flt.replica_partners_without(members, 'h100-a', [True, False, None]) == ['h100-b', 'h100-c']
    assert flt.replica_partners_without(members, 'h100-b', [True]) == ['h100-c']      # a missing value: not set
    replica = {'name': 'r1', 'members': ['h100-a', 'h100-b'], 'head': 'h100-a'}
    gpu = {'driver_version': '580.95.05'}
    assert flt.replica_with_gpus(replica, [{'nvidia_gpu': gpu}, {'failed': True}])['gpus'] == {'h100-a': gpu, 'h100-b': None}
    assert flt.replica_with_gpus(None, []) is None
    ok = {'failed': False}
    assert flt.replica_gate_problems(MEMBERS, [ok, None], [None, {'stdout': 'ActiveState=active\nNRestarts=0'}],
                                     [{'nrestarts': 0}, {'nrestarts': 0}]) == []
    # the baseline is the worker's start's nrestarts (inkling.fleet.unit_run): a restart above it is a crash
    assert flt.replica_gate_problems(MEMBERS, [ok, None], [None, {'stdout': 'ActiveState=active\nNRestarts=3'}],
                                     [None, {'nrestarts': 2}]) != []
    assert flt.replica_gate_problems(MEMBERS, [ok, None], [None, {'stdout': 'ActiveState=active\nNRestarts=2'}],
                                     [None, {'nrestarts': 2}]) == []
    assert flt.replica_gate_problems(MEMBERS, [ok, None], [None, {'stdout': 'ActiveState=failed\nNRestarts=0'}],
                                     [None, None]) == ['the worker h100-b is failed']
    assert flt.replica_gate_problems(MEMBERS, [ok, None], [None, {'skipped': True}], [None, None]) == [
        'the worker h100-b did not get as far as its restart']


def test_the_filters_read_the_plan_and_the_contracts_from_hostvars():
    entry = {'replica': {'name': 'r1', 'head': 'h100-b'}}
    hostvars = {'s1': {'rollout_deployment': {'entry': {}}},
                'h100-a': {'rollout_deployment': {'entry': entry}},
                'h100-b': {'rollout_deployment': {'entry': entry}}}
    plan = flt.replica_batches(['h100-a', 's1', 'h100-b'], hostvars, 1)
    assert plan == {'hosts': ['h100-b', 'h100-a', 's1'], 'serial': [2, 1]}
    hostvars['s1']['rollout_batch_plan'] = plan
    assert flt.rollout_plan(['h100-a', 's1'], hostvars, 'serial', [9]) == [2, 1]
    assert flt.rollout_plan(['h100-a'], hostvars, 'hosts', 'inkling_fleet') == 'inkling_fleet'


# --- one canary per variant (batches keys=, replica_batches per_variant=) ---------------------

FLEET = ['h200-1', 'h200-2', 'b200-1', 'b200-2']
FLEET_VARIANTS = {'h200-1': 'sm90-patched', 'h200-2': 'sm90-patched', 'b200-1': 'sm100', 'b200-2': 'sm100'}


def split(order, sizes):
    out, position = [], 0
    for size in sizes:
        out.append(order[position:position + size])
        position += size
    assert position == len(order)
    return out


def test_per_variant_puts_one_canary_of_each_variant_before_any_second_host():
    order, sizes = rep.batches(FLEET, {}, [1, '50%'], keys=FLEET_VARIANTS)
    # One canary of each variant, side by side in the first batch (a failed canary halts before any
    # second host of its variant stops), then the serial plan from its second entry on (50 % of 4: 2).
    assert split(order, sizes) == [['h200-1', 'b200-1'], ['h200-2', 'b200-2']]


def test_without_per_variant_the_plan_is_the_old_one():
    assert split(*rep.batches(FLEET, {}, [1, '50%'])) == [['h200-1'], ['h200-2', 'b200-1'], ['b200-2']]
    assert split(*rep.batches(FLEET, {}, [1, '50%'], keys=None)) == [['h200-1'], ['h200-2', 'b200-1'], ['b200-2']]


def test_the_rest_follow_the_serial_plan_from_its_second_entry():
    hosts = ['h%d' % i for i in range(1, 6)] + ['b%d' % i for i in range(1, 4)]
    keys = dict((h, 'sm90-patched' if h.startswith('h') else 'sm100') for h in hosts)
    # 8 hosts: canaries h1 and b1, then 2, 3, 3, ... (the last entry repeats) of the 6 left.
    assert split(*rep.batches(hosts, {}, [1, 2, 3], keys=keys)) == \
        [['h1', 'b1'], ['h2', 'h3'], ['h4', 'h5', 'b2'], ['b3']]
    # Percentages are of all the replicas of the run, canaries included (25 % of 8: 2).
    assert split(*rep.batches(hosts, {}, [1, '25%'], keys=keys)) == \
        [['h1', 'b1'], ['h2', 'h3'], ['h4', 'h5'], ['b2', 'b3']]
    # A plain 1: the canaries together, then every batch one host.
    assert split(*rep.batches(hosts, {}, 1, keys=keys)) == [['h1', 'b1']] + [[h] for h in ['h2', 'h3', 'h4', 'h5', 'b2', 'b3']]


@pytest.mark.parametrize('serial', [['100%'], [2, '50%'], '50%', 3])
def test_per_variant_changes_nothing_when_the_first_batch_is_not_a_canary(serial):
    assert rep.batches(FLEET, {}, serial, keys=FLEET_VARIANTS) == rep.batches(FLEET, {}, serial)


@pytest.mark.parametrize('serial', [1, [1, '50%'], [1, 2], [1, '25%', '100%']])
def test_per_variant_with_one_variant_is_the_plan_without(serial):
    keys = dict((h, 'sm90-patched') for h in ORDER)
    assert rep.batches(ORDER, REPLICAS, serial, {'r2': 'h100-d'}, keys) == \
        rep.batches(ORDER, REPLICAS, serial, {'r2': 'h100-d'})


# s1-s3 serve alone (sm90-patched); r1 and r2 are 2-node replicas of another variant.
MULTI_VARIANTS = dict([(h, 'sm90-patched') for h in ('s1', 's2', 's3')]
                      + [(h, 'sm90-h100-2node') for h in ('h100-a', 'h100-b', 'h100-c', 'h100-d')])


def test_per_variant_keeps_a_multi_node_replica_together_head_first():
    got = split(*rep.batches(ORDER, REPLICAS, [1, '50%'], {'r2': 'h100-d'}, MULTI_VARIANTS))
    # Units in host order: s1, r1, s2, s3, r2 (5); the canaries s1 and r1 (a replica is one canary,
    # all its members together), then 50 % of 5 replicas (2) a batch.
    assert got == [['s1', 'h100-a', 'h100-b'], ['s2', 's3'], ['h100-d', 'h100-c']]


@pytest.mark.parametrize('serial', [1, [1, '50%'], [1, 2], [1, '10%'], ['100%'], [2, 1]])
@pytest.mark.parametrize('keys', [MULTI_VARIANTS, dict((h, h[:2]) for h in ORDER), None])
def test_every_host_appears_exactly_once_and_no_batch_splits_a_replica(serial, keys):
    order, sizes = rep.batches(ORDER, REPLICAS, serial, {'r2': 'h100-d'}, keys)
    assert sorted(order) == sorted(ORDER) and len(order) == len(set(order)) == sum(sizes)
    assert all(size >= 1 for size in sizes)
    for batch in split(order, sizes):
        for name in set(REPLICAS.get(h) for h in batch) - {None}:
            assert set(h for h, r in REPLICAS.items() if r == name) <= set(batch)


def fleet_hostvars():
    hostvars = dict((h, {'rollout_deployment': {'variant': v, 'entry': {'name': v}}}) for h, v in FLEET_VARIANTS.items())
    entry = {'name': 'sm90-h100-2node', 'replica': {'name': 'r1', 'head': 'h100-b'}}
    for host in ('h100-a', 'h100-b'):
        hostvars[host] = {'rollout_deployment': {'variant': 'sm90-h100-2node', 'entry': entry}}
    return hostvars


def test_the_filter_plans_a_canary_per_variant_only_when_asked():
    hosts = FLEET + ['h100-a', 'h100-b']
    hostvars = fleet_hostvars()
    assert flt.replica_batches(hosts, hostvars, [1, '50%'], per_variant=True) == {
        'hosts': ['h200-1', 'b200-1', 'h100-b', 'h100-a', 'h200-2', 'b200-2'], 'serial': [4, 2]}
    # The positional form of the playbook's call (fact, per_variant).
    assert flt.replica_batches(hosts, hostvars, [1, '50%'], 'rollout_deployment', True)['serial'] == [4, 2]
    old = {'hosts': ['h200-1', 'h200-2', 'b200-1', 'b200-2', 'h100-b', 'h100-a'], 'serial': [1, 2, 3]}
    assert flt.replica_batches(hosts, hostvars, [1, '50%']) == old
    assert flt.replica_batches(hosts, hostvars, [1, '50%'], per_variant=False) == old
