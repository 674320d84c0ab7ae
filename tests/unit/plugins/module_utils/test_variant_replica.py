# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Multi-node replicas in the variant table (module_utils/variant.py): selection and refusals,
on public H100 80GB values (tests/unit/fixtures/public: 81559 MiB, compute capability 9.0,
"NVIDIA H100 80GB HBM3", driver 590.48.01, from utkuozdemir/nvidia_gpu_exporter's capture)."""

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import variant as vt
from inkling_test_helpers import default_table, facts_from_rows, h200_rows, public_rows

BIG = 'thinkingmachines/Inkling-NVFP4'


@pytest.fixture
def table():
    return default_table()[0]


def h100(count=8, gpu_name=None, **override):
    gpu = facts_from_rows(public_rows('h100-80gb-hbm3', count=count, **override))
    for item in gpu['gpus']:
        item['name'] = gpu_name or item['name']
    return gpu


def replica(members, gpus, name='r1', port=29550):
    return {'name': name, 'members': members, 'gpus': gpus, 'head_address': '10.0.0.1', 'port': port}


def pick(host, gpus, table, members=None, **kwargs):
    members = members or sorted(gpus)
    return vt.select_variant(gpus[host], BIG, 8, table, host=host, replica=replica(members, gpus), **kwargs)


def refused(host, gpus, table, members=None):
    with pytest.raises(vt.VariantRefused) as err:
        pick(host, gpus, table, members)
    for reason in err.value.reasons:
        assert reason.startswith(host + ': ') and 'Remedy: ' in reason, reason
    return err.value.refusals


def test_public_h100_values_are_the_ones_the_tests_use():
    gpu = h100()
    assert gpu['gpu_count'] == 8 and gpu['compute_caps'] == ['9.0']
    assert set(g['memory_total_mib'] for g in gpu['gpus']) == {81559}
    assert set(g['name'] for g in gpu['gpus']) == {'NVIDIA H100 80GB HBM3'}


def test_two_h100_hosts_in_a_replica_get_the_two_node_entry(table):
    gpus = {'h100-a': h100(), 'h100-b': h100()}
    head, reasons = pick('h100-a', gpus, table)
    worker = pick('h100-b', gpus, table)[0]
    assert head['name'] == worker['name'] == 'sm90-h100-2node'
    assert head['nodes_per_replica'] == 2
    assert head['replica'] == {
        'name': 'r1', 'members': ['h100-a', 'h100-b'], 'head': 'h100-a', 'node_rank': 0, 'role': 'head',
        'head_address': '10.0.0.1', 'port': 29550,
        'args': ['--data-parallel-address', '10.0.0.1', '--data-parallel-rpc-port', '29550']}
    assert worker['replica']['role'] == 'worker' and worker['replica']['node_rank'] == 1
    assert worker['replica']['args'] == ['--headless', '--data-parallel-start-rank', '1', '--data-parallel-address',
                                         '10.0.0.1', '--data-parallel-rpc-port', '29550']
    # Every member gets the same entry: the deployment contract is the replica's.
    assert dict(head, replica=None) == dict(worker, replica=None)
    assert '1304944 MiB' in reasons[0] and 'NVIDIA H100 80GB HBM3 x 8' in reasons[0]


def test_the_head_is_the_first_member_as_given(table):
    gpus = {'h100-a': h100(), 'h100-b': h100()}
    variant = pick('h100-a', gpus, table, members=['h100-b', 'h100-a'])[0]
    assert variant['replica']['role'] == 'worker' and variant['replica']['head'] == 'h100-b'


def test_one_h100_host_alone_is_refused_with_the_replica_remedy(table):
    with pytest.raises(vt.VariantRefused) as err:
        vt.select_variant(h100(), BIG, 8, table, host='h100-a')
    assert [r['check'] for r in err.value.refusals] == ['gpu.memory']
    assert 'group 2 identical hosts into a replica' in err.value.reasons[0]
    assert '652472 MiB' in err.value.reasons[0]


def test_a_replica_of_one_is_the_same_as_no_replica(table):
    with pytest.raises(vt.VariantRefused) as err:
        pick('h100-a', {'h100-a': h100()}, table)
    assert 'group 2 identical hosts' in err.value.reasons[0]


def test_an_incomplete_group_names_the_missing_member(table):
    refs = refused('h100-a', {'h100-a': h100(), 'h100-b': None}, table)
    assert [r['check'] for r in refs] == ['replica']
    assert 'no GPU facts from h100-b' in refs[0]['message'] and 'expected all of h100-a, h100-b' in refs[0]['message']


def test_too_many_members_are_refused(table):
    gpus = {'h100-a': h100(), 'h100-b': h100(), 'h100-c': h100()}
    refs = refused('h100-c', gpus, table)
    assert 'replica r1 has 3 host(s) (h100-a, h100-b, h100-c); entry sm90-h100-2node needs exactly 2' in \
        refs[0]['message']


@pytest.mark.parametrize('worker, found', [
    (lambda: h100(count=7), 'h100-b has GPU count 7, the head h100-a has 8'),
    (lambda: h100(driver_version='580.95.05'), 'h100-b has driver 580.95.05, the head h100-a has 590.48.01'),
    (lambda: h100(gpu_name='NVIDIA H100 PCIe'),
     'h100-b has gpu model NVIDIA H100 PCIe, the head h100-a has NVIDIA H100 80GB HBM3'),
])
def test_mismatched_members_are_refused_naming_both(table, worker, found):
    gpus = {'h100-a': h100(), 'h100-b': worker()}
    for host in ('h100-a', 'h100-b'):
        refs = [r for r in refused(host, gpus, table) if r['check'] == 'replica']
        assert len(refs) == 1, refs
        assert found in refs[0]['message']
        assert 'make h100-b match h100-a' in refs[0]['remedy']


def test_a_member_short_of_gpus_keeps_its_own_count_refusal(table):
    refs = refused('h100-b', {'h100-a': h100(), 'h100-b': h100(count=4)}, table)
    assert [r['check'] for r in refs] == ['gpu.count', 'replica']


def test_hosts_that_hold_the_model_alone_must_not_be_grouped(table):
    gpus = {'h200-a': facts_from_rows(h200_rows(8)), 'h200-b': facts_from_rows(h200_rows(8))}
    with pytest.raises(vt.VariantRefused) as err:
        vt.select_variant(gpus['h200-a'], BIG, 8, table, host='h200-a', replica=replica(['h200-a', 'h200-b'], gpus))
    assert 'groups this host into replica r1 (h200-a, h200-b), but one host holds' in err.value.reasons[0]
    assert 'remove inkling_replica' in err.value.reasons[0]


def test_an_old_driver_on_the_replica_is_refused(table):
    gpus = {'h100-a': h100(driver_version='570.86.10'), 'h100-b': h100(driver_version='570.86.10')}
    refs = refused('h100-b', gpus, table)
    assert [r['check'] for r in refs] == ['driver.version']
    assert 'every member of replica r1' in refs[0]['remedy']


def test_a_disabled_multi_node_entry_leaves_the_memory_refusal(table):
    gpus = {'h100-a': h100(), 'h100-b': h100()}
    with pytest.raises(vt.VariantRefused) as err:
        pick('h100-a', gpus, table, overrides={'sm90-h100-2node': {'enabled': False}})
    assert [r['check'] for r in err.value.refusals] == ['gpu.memory']
    assert 'replica' not in err.value.reasons[0]


@pytest.mark.parametrize('override, expected', [
    ({'node_args': {'head': ['--x', '{nope}'], 'worker': []}}, 'unknown placeholder {nope}'),
    ({'node_args': None}, 'node_args is missing'),
    ({'node_args': {'head': [], 'worker': [], 'other': []}}, "node_args has unknown key 'other'"),
    ({'nodes_per_replica': 1}, 'node_args needs nodes_per_replica of 2 or more'),
])
def test_node_args_are_validated(table, override, expected):
    merged = vt.merge_table(table, {'sm90-h100-2node': override})
    with pytest.raises(vt.VariantTableError) as err:
        vt.validate_table(merged, 1)
    assert expected in str(err.value)


def test_single_host_entries_keep_their_shape(table):
    variant = vt.select_variant(facts_from_rows(h200_rows(8)), BIG, 8, table, host='h200-a')[0]
    assert 'nodes_per_replica' not in variant and 'node_args' not in variant and 'replica' not in variant
