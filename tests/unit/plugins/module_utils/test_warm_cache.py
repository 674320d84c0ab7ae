# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The pure functions of warm restarts: cache key, seed source, manifests, pruning, page-cache decision."""

import os
import random

import pytest

from ansible_collections.inkling.fleet.plugins.filter import warm_cache as filters
from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache as wc

D1 = 'sha256:' + '1' * 64
D2 = 'sha256:' + '2' * 64
GIB = 1024 ** 3
H200 = {'driver_version': '580.159.04', 'gpu_count': 8, 'gpus': [{'name': 'NVIDIA H200'}] * 8}
DEPLOY = {'variant': 'sm90-patched', 'image_digest': D1, 'tensor_parallel_size': 8}


def key(**change):
    args = dict(variant='sm90-patched', image_digest=D1, gpu_model='NVIDIA H200', gpu_count=8,
                driver_version='580.159.04', tensor_parallel_size=8)
    args.update(change)
    return wc.cache_key(**args)


def test_key_is_a_pure_function_of_its_inputs():
    assert key() == key()
    assert len(key()['id']) == 16
    assert key()['id'] == wc.key_id(key())
    assert key(gpu_count='8') == key()


@pytest.mark.parametrize('change', [
    {'variant': 'sm90-upstream'}, {'image_digest': D2}, {'gpu_model': 'NVIDIA B200'}, {'gpu_count': 4},
    {'driver_version': '580.95.05'}, {'tensor_parallel_size': 4}])
def test_every_input_changes_the_key(change):
    assert key(**change)['id'] != key()['id']


@pytest.mark.parametrize('change, words', [
    ({'variant': ''}, 'variant is empty'), ({'image_digest': 'latest'}, 'image_digest'),
    ({'gpu_model': None}, 'gpu_model is empty'), ({'driver_version': ''}, 'driver_version is empty'),
    ({'gpu_count': 0}, 'gpu_count'), ({'tensor_parallel_size': 'eight'}, 'tensor_parallel_size'),
    ({'tensor_parallel_size': 2.5}, 'tensor_parallel_size')])
def test_bad_inputs_are_named(change, words):
    with pytest.raises(wc.KeyError_, match=words):
        key(**change)


def test_key_from_facts_and_the_filter():
    k = wc.key_from_facts(DEPLOY, H200)
    assert k == key()
    mixed = dict(H200, gpus=[{'name': 'NVIDIA H200'}, {'name': 'NVIDIA H100 80GB HBM3'}])
    assert wc.key_from_facts(DEPLOY, mixed)['gpu_model'] == 'NVIDIA H100 80GB HBM3 + NVIDIA H200'
    assert filters.cache_key(DEPLOY, H200) == k
    bad = filters.cache_key(DEPLOY, {})
    assert bad['id'] == '' and 'driver_version is empty' in bad['error']


def test_seed_source_only_from_the_same_key():
    k = key()
    seeds = {'b200-01': {'key': key(gpu_model='NVIDIA B200', driver_version='580.95.05'), 'url': 'u0'},
             'h200-01': {'key': k, 'url': 'u1', 'files': []},
             'h200-03': {'key': k, 'url': 'u3'},
             'h200-04': {'key': key(driver_version='590.48.01'), 'url': 'u4'}}
    order = ['b200-01', 'h200-01', 'h200-02', 'h200-03', 'h200-04']
    assert wc.seed_source('h200-02', k, seeds, order) == 'h200-01'
    assert wc.seed_source('h200-01', k, seeds, order) == 'h200-03'  # never itself
    assert wc.seed_source('b200-02', key(gpu_model='NVIDIA B200', driver_version='580.95.05'), seeds, order) == 'b200-01'
    assert wc.seed_source('h200-05', key(gpu_count=4), seeds, order) is None
    # a seed whose id matches but whose fields differ (a forged or stale id) is not used
    forged = dict(key(driver_version='590.48.01'), id=k['id'])
    assert wc.seed_source('h200-02', k, {'h200-09': {'key': forged}}, ['h200-09']) is None
    assert filters.cache_seed_source(k, 'h200-02', seeds, order) == dict(seeds['h200-01'], host='h200-01')
    assert filters.cache_seed_source({'id': '', 'error': 'x'}, 'h200-02', seeds, order) == {}
    assert filters.cache_seed_source(k, 'h200-02', {'h200-01': {}, 'h200-03': ''}, order) == {}


def test_the_table_read_once_per_batch_gives_every_host_the_source_it_found_before():
    """The seeds published so far are read once per batch (restart_phases.yml); each host's source in that table is
    the one it found before by reading every host of the play (warm.yml, cache_publish.yml)."""
    rnd = random.Random(34)
    keys = [key(), key(gpu_model='NVIDIA B200', driver_version='580.95.05'), key(gpu_count=4), {'id': '', 'error': 'x'}]
    for dummy in range(200):
        order = ['gpu-%03d' % i for i in range(rnd.randint(1, 60))]
        published = dict((h, {'key': rnd.choice(keys[:3]), 'url': 'u-' + h, 'token': 't', 'files': []}
                          if rnd.random() < 0.15 else {}) for h in order)
        table = filters.cache_seed_table(published, order)
        assert table['order'] == [h for h in order if published[h]]
        assert set(table['seeds']) == set(table['order'])
        for host in order:
            k = rnd.choice(keys)
            assert filters.cache_seed_source(k, host, table['seeds'], table['order']) == \
                filters.cache_seed_source(k, host, published, order)
    assert filters.cache_seed_table({}, ['a']) == {'order': [], 'seeds': {}}


def test_manifest_lists_regular_files_only(tmp_path):
    (tmp_path / 'vllm' / 'torch_compile_cache').mkdir(parents=True)
    (tmp_path / 'vllm' / 'torch_compile_cache' / 'a.bin').write_bytes(b'abc')
    (tmp_path / 'triton').mkdir()
    (tmp_path / 'triton' / 'k.cubin').write_bytes(b'')
    os.symlink('/etc/passwd', str(tmp_path / 'triton' / 'link'))
    (tmp_path / 'other').mkdir()
    (tmp_path / 'other' / 'x').write_text('not a cache subdir')
    (tmp_path / wc.KEY_FILE).write_text('{}')
    files, left_out = wc.build_manifest(str(tmp_path), ['vllm', 'triton'])
    assert [f['path'] for f in files] == ['triton/k.cubin', 'vllm/torch_compile_cache/a.bin']
    assert files[1]['size'] == 3
    assert files[1]['sha256'] == 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    assert left_out == ['triton/link']
    assert wc.check_manifest(files, ['vllm', 'triton']) == []
    assert not wc.set_is_empty(str(tmp_path), ['vllm'])
    assert wc.set_is_empty(str(tmp_path), ['cuda', 'deepgemm'])


@pytest.mark.parametrize('path', ['../etc/passwd', '/etc/passwd', 'vllm/../../x', 'other/x', 'vllm', 'vllm//a'])
def test_manifest_paths_outside_the_set_are_refused(path):
    problems = wc.check_manifest([{'path': path, 'size': 1, 'sha256': 'a' * 64}], ['vllm', 'triton'])
    assert problems and 'not inside a cache subdirectory' in problems[0]


def test_manifest_bad_hash_and_size():
    problems = wc.check_manifest([{'path': 'vllm/a', 'size': -1, 'sha256': 'xyz'}], ['vllm'])
    assert len(problems) == 2


def test_prune_keeps_running_and_rollback_only():
    present = [['sm90-patched', 'a' * 64], ['sm90-patched', 'b' * 64], ['sm90-patched', 'c' * 64],
               ['sm90-upstream', 'a' * 64]]
    keep = [['sm90-patched', 'c' * 64], ['sm90-patched', 'a' * 64]]
    assert wc.prune_plan(present, keep) == [['sm90-patched', 'b' * 64], ['sm90-upstream', 'a' * 64]]
    # nothing named to keep: nothing removed
    assert wc.prune_plan(present, []) == []
    assert wc.prune_plan(present, [['', '']]) == []
    assert wc.prune_plan(present, present) == []


MEMINFO = 'MemTotal:       2113536000 kB\nMemFree:        1000 kB\nMemAvailable:   1800000000 kB\nHugePages_Total: 0\n'


def test_parse_meminfo():
    mem = wc.parse_meminfo(MEMINFO)
    assert mem['MemTotal'] == 2113536000 * 1024
    assert mem['MemAvailable'] == 1800000000 * 1024
    assert mem['HugePages_Total'] == 0


def test_warm_decision():
    total = 2 * 1024 * GIB
    snapshot = 592 * 10 ** 9
    yes = wc.warm_decision(1700 * GIB, total, snapshot, 10, 4)
    assert yes['warm'] and yes['margin_bytes'] == int(total * 0.1)
    # MemAvailable minus the margin just below the snapshot: no
    no = wc.warm_decision(snapshot + int(total * 0.1) - 1, total, snapshot, 10, 4)
    assert not no['warm'] and no['reason'].startswith('not enough memory')
    exact = wc.warm_decision(snapshot + int(total * 0.1), total, snapshot, 10, 4)
    assert exact['warm']
    # the minimum margin wins on a small host
    small = wc.warm_decision(6 * GIB, 24 * GIB, 3 * GIB, 10, 4)
    assert small['margin_bytes'] == 4 * GIB and not small['warm']
    assert not wc.warm_decision(100 * GIB, total, 0, 10, 4)['warm']
    assert wc.keep_reading(5 * GIB, 4 * GIB) and not wc.keep_reading(4 * GIB, 4 * GIB)


def test_read_sequentially_reads_everything_or_stops_at_the_margin(tmp_path):
    a, b = tmp_path / 'a', tmp_path / 'b'
    a.write_bytes(b'a' * 5000)
    b.write_bytes(b'b' * 3000)
    files = [(str(a), 5000), (str(b), 3000)]
    calls = []

    def plenty():
        calls.append(1)
        return 10 * GIB
    assert wc.read_sequentially(files, 1024, plenty, 4 * GIB) == (8000, None)
    assert len(calls) == 6  # once 1024 bytes or more were read since the last check
    readings = iter([10 * GIB, 10 * GIB, 4 * GIB])
    done, why = wc.read_sequentially(files, 1024, lambda: next(readings), 4 * GIB)
    assert done == 3 * 1024 and why.startswith('stopped after 3072 bytes: MemAvailable fell to')
