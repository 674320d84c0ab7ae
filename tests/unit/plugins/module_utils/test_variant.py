# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Variant table merge, validation and selection (module_utils/variant.py) on the shipped table."""

import copy

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import variant as vt
from inkling_test_helpers import capture_rows, default_table, facts_from_rows, h200_rows, public_rows

BIG = 'thinkingmachines/Inkling-NVFP4'
SMALL = 'thinkingmachines/Inkling-Small-NVFP4'


@pytest.fixture
def table():
    return default_table()[0]


def select(gpu, model, tp, table, **kwargs):
    kwargs.setdefault('host', 'gpu-node-01')
    return vt.select_variant(gpu, model, tp, table, **kwargs)


def refused(gpu, model, tp, table, **kwargs):
    with pytest.raises(vt.VariantRefused) as err:
        select(gpu, model, tp, table, **kwargs)
    for reason in err.value.reasons:
        assert reason.startswith('gpu-node-01: ') or reason.startswith('gpu-node-01:'), reason
        assert 'Remedy' in reason, reason
    return err.value.reasons


def test_shipped_table_is_valid_and_versioned():
    table, version = default_table()
    assert version == vt.SCHEMA_VERSION
    vt.validate_table(table, version)
    assert {'sm90-patched', 'sm90-upstream', 'sm100', 'sm90-small-tp2', 'sm100-small-tp2'} <= set(table)
    assert table['sm90-upstream']['enabled'] is False
    for name, entry in table.items():
        assert entry['min_driver'] and entry['sources'], name
        assert all(not a.startswith(('--port', '--host', '--model', '--served-model-name')) for a in entry['vllm_args'])


def _entry(table, name):
    """What selecting NAME must publish: the table's entry as written, with its name, without `enabled`."""
    entry = dict(copy.deepcopy(table[name]), name=name)
    entry.pop('enabled', None)
    return entry


def test_8x_h200_gets_the_patched_hopper_entry_verbatim(table):
    """Selection picks the entry by model, capability and TP, and publishes it unchanged."""
    variant, reasons = select(facts_from_rows(h200_rows(8)), BIG, 8, table)
    assert variant == _entry(table, 'sm90-patched')
    assert reasons[0] == ('gpu-node-01: 8 GPU(s), compute capability 9.0, driver 580.159.04; entry sm90-patched '
                          'matches model %s, compute capability 9.0 and tensor parallel size 8' % BIG)
    assert any('disabled entries not considered: sm90-upstream' in r for r in reasons)
    # The entry's own TP argument is the one asked for (a table edit that breaks this is a table error).
    args = variant['vllm_args']
    assert args[args.index('--tensor-parallel-size') + 1] == '8'


def test_selection_follows_the_table_not_fixed_values(table):
    """Changing an entry's settings changes what is published; nothing is hard-coded in the selection."""
    edited = copy.deepcopy(table)
    edited['sm90-patched']['env'] = {'SOME_SETTING': 'x'}
    edited['sm90-patched']['image'] = {'reference': 'registry.example.com/vllm/vllm-openai:v9', 'digest': None}
    variant, dummy = select(facts_from_rows(h200_rows(8)), BIG, 8, edited)
    assert variant == _entry(edited, 'sm90-patched')


def test_8x_b200_gets_the_blackwell_entry_verbatim(table):
    variant, dummy = select(facts_from_rows(public_rows('b200')), BIG, 8, table)
    assert variant == _entry(table, 'sm100')
    assert variant['architecture'] == 'blackwell'


def test_real_2x_h200_with_inkling_small_tp2(table):
    variant, unused1 = select(facts_from_rows(capture_rows()), SMALL, 2, table)
    assert variant['name'] == 'sm90-small-tp2'
    assert variant['served_model_name'] == 'inkling-small'


def test_2x_b200_with_inkling_small_tp2(table):
    variant, unused1 = select(facts_from_rows(public_rows('b200', count=2)), SMALL, 2, table)
    assert variant['name'] == 'sm100-small-tp2'


def test_tp2_on_an_8_gpu_host_counts_only_the_tp_group_memory(table):
    h100 = facts_from_rows(public_rows('h100-80gb-hbm3'))
    reasons = refused(h100, SMALL, 2, table)
    assert len(reasons) == 1
    assert '163118 MiB' in reasons[0] and '184320' in reasons[0]


def test_8x_h100_is_refused_for_the_975b_model_on_memory(table):
    reasons = refused(facts_from_rows(public_rows('h100-80gb-hbm3')), BIG, 8, table)
    assert len(reasons) == 1
    assert '%d MiB' % (8 * 81559) in reasons[0]
    assert 'needs at least 666624 MiB' in reasons[0]
    assert BIG in reasons[0]


def test_real_2x_h200_is_refused_for_the_975b_model_on_count_and_memory(table):
    reasons = refused(facts_from_rows(capture_rows()), BIG, 8, table)
    assert len(reasons) == 2
    assert 'found 2 GPU(s); tensor parallel size 8 needs 8' in reasons[0]
    assert '287542 MiB' in reasons[1]


def test_a_missing_gpu_is_refused(table):
    reasons = refused(facts_from_rows(h200_rows(7)), BIG, 8, table)
    assert len(reasons) == 1 and 'found 7 GPU(s)' in reasons[0]


def test_mixed_compute_capabilities_are_refused(table):
    rows = h200_rows(4) + public_rows('b200', count=4)
    for index, row in enumerate(rows):
        row['index'] = str(index)
    reasons = refused(facts_from_rows(rows), BIG, 8, table)
    assert any('mixed compute capabilities (9.0 on GPU 0,1,2,3, 10.0 on GPU 4,5,6,7)' in r for r in reasons)


def test_sm120_is_refused_with_the_known_reason(table):
    gpu = facts_from_rows(h200_rows(8))
    for item in gpu['gpus']:
        item['compute_cap'] = '12.0'
    gpu['compute_caps'] = ['12.0']
    reasons = refused(gpu, BIG, 8, table)
    assert len(reasons) == 1
    assert '#51405' in reasons[0] and 'Paged KV not supported on SM 12.0' in reasons[0]
    assert 'after the full weight load' in reasons[0]


def test_an_unsupported_capability_names_what_is_supported(table):
    gpu = facts_from_rows(h200_rows(8))
    gpu['compute_caps'] = ['8.0']
    reasons = refused(gpu, BIG, 8, table)
    assert 'found compute capability 8.0' in reasons[0] and '(supported: 9.0, 10.0)' in reasons[0]


def test_b300_is_not_claimed_for_the_975b_model(table):
    gpu = facts_from_rows(public_rows('b200'))
    gpu['compute_caps'] = ['10.3']
    reasons = refused(gpu, BIG, 8, table)
    assert 'B300/GB300 (10.3) is not listed' in reasons[0]
    assert all('10.3' not in e['compute_caps'] for e in table.values() if e['model']['repo_id'] == BIG)


def test_unknown_compute_capability_is_refused(table):
    rows = h200_rows(8)
    for row in rows:
        row['compute_cap'] = '[N/A]'
    reasons = refused(facts_from_rows(rows), BIG, 8, table)
    assert 'compute capability is unknown' in reasons[0]


def test_no_gpu_is_refused(table):
    gpu = {'gpu_count': 0, 'gpus': [], 'compute_caps': [], 'driver_version': None}
    reasons = refused(gpu, BIG, 8, table)
    assert 'found no GPU' in reasons[0]


def test_mig_enabled_is_refused_naming_the_gpu(table):
    rows = h200_rows(8)
    rows[0].update({'mig.mode.current': 'Enabled', 'mig.mode.pending': 'Enabled'})
    reasons = refused(facts_from_rows(rows), BIG, 8, table)
    assert len(reasons) == 1
    assert 'GPU 0 current=Enabled pending=Enabled' in reasons[0] and 'nvidia-smi -i <gpu> -mig 0' in reasons[0]


def test_mig_pending_only_is_refused(table):
    rows = h200_rows(8)
    rows[5]['mig.mode.pending'] = 'Enabled'
    reasons = refused(facts_from_rows(rows), BIG, 8, table)
    assert 'GPU 5 current=Disabled pending=Enabled' in reasons[0]


def test_public_h200_mig_capture_is_refused(table):
    reasons = refused(facts_from_rows(public_rows('h200-mig')), BIG, 8, table)
    assert any('MIG is enabled' in r for r in reasons)


def test_old_driver_is_refused(table):
    rows = h200_rows(8)
    for row in rows:
        row['driver_version'] = '535.183.01'
    reasons = refused(facts_from_rows(rows), BIG, 8, table)
    assert len(reasons) == 1
    assert 'driver 535.183.01 is older than 580.65.06' in reasons[0]


def test_driver_comparison_is_numeric(table):
    rows = h200_rows(8)
    for row in rows:
        row['driver_version'] = '580.100.01'  # "100" < "65" as strings
    variant, reasons = select(facts_from_rows(rows), BIG, 8, table)
    assert variant['name'] == 'sm90-patched'
    assert 'driver 580.100.01 >= 580.65.06' in reasons


def test_all_reasons_are_collected(table):
    rows = h200_rows(7)
    rows[3]['mig.mode.current'] = 'Enabled'
    for row in rows:
        row['driver_version'] = '550.90.07'
    reasons = refused(facts_from_rows(rows), BIG, 8, table)
    assert len(reasons) == 3
    joined = ' '.join(reasons)
    assert 'found 7 GPU(s)' in joined and 'MIG' in joined and 'driver 550.90.07' in joined


def test_tensor_parallel_size_without_entry(table):
    reasons = refused(facts_from_rows(h200_rows(8)), BIG, 4, table)
    assert 'uses tensor parallel size 4 (entries use 8)' in reasons[0]


def test_unknown_model(table):
    reasons = refused(facts_from_rows(h200_rows(8)), 'someone/Other-Model', 8, table)
    assert 'no enabled variant serves model someone/Other-Model' in reasons[0]


def test_overrides_enable_the_upstream_entry_which_wins_by_priority(table):
    overrides = {'sm90-upstream': {'enabled': True}}
    variant, reasons = select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides=overrides)
    assert variant['name'] == 'sm90-upstream'
    assert variant['image']['reference'] == 'docker.io/vllm/vllm-openai:v0.28.0'
    assert 'picked sm90-upstream (priority 20) over sm90-patched (priority 10) by priority' in reasons


def test_overrides_merge_recursively_and_replace_lists(table):
    digest = 'sha256:' + 'a' * 64
    overrides = {'sm90-patched': {'image': {'digest': digest}, 'env': {'VLLM_ENGINE_READY_TIMEOUT_S': '3600'},
                                  'notes': ['site note']}}
    before = copy.deepcopy(table)
    variant, unused1 = select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides=overrides)
    assert variant['image'] == {'reference': 'quay.io/vllm/automation-vllm:cuda-29455473553', 'digest': digest}
    assert variant['env'] == {'VLLM_USE_V2_MODEL_RUNNER': '1', 'FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED': '1',
                              'VLLM_ENGINE_READY_TIMEOUT_S': '3600'}
    assert variant['notes'] == ['site note']
    assert table == before  # the inputs are not modified


def test_overrides_add_a_new_entry(table):
    entry = copy.deepcopy(table['sm90-patched'])
    entry['image']['reference'] = 'registry.example.com/ml/vllm:site-build'
    entry['priority'] = 50
    variant, unused1 = select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides={'site-h200': entry})
    assert variant['name'] == 'site-h200'


def test_disabled_entries_are_skipped(table):
    reasons = refused(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides={'sm90-patched': {'enabled': False}})
    assert 'no enabled variant of %s supports it (supported: 10.0)' % BIG in reasons[0]


def test_a_disabled_partial_entry_is_not_validated(table):
    variant, unused1 = select(facts_from_rows(h200_rows(8)), BIG, 8, table,
                              overrides={'draft': {'enabled': False, 'image': {'reference': 'short/name'}}})
    assert variant['name'] == 'sm90-patched'


def test_equal_priorities_are_a_table_error(table):
    overrides = {'sm90-upstream': {'enabled': True, 'priority': 10}}
    with pytest.raises(vt.VariantTableError) as err:
        select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides=overrides)
    assert 'sm90-patched, sm90-upstream' in str(err.value) and 'same priority 10' in str(err.value)


@pytest.mark.parametrize('override,expected', [
    ({'image': {'reference': 'vllm/vllm-openai:v0.28.0'}},
     "entry 'sm100': image.reference 'vllm/vllm-openai:v0.28.0' is not fully qualified"),
    ({'image': {'reference': 'vllm-openai:latest'}}, 'is not fully qualified'),
    ({'image': {'reference': 'docker.io/vllm/vllm-openai@sha256:' + 'a' * 64}}, 'carries a digest'),
    ({'image': {'digest': 'sha256:abc'}}, 'image.digest must be null or'),
    ({'vllm_args': ['--port', '8000']}, 'must not contain --port'),
    ({'vllm_args': ['--served-model-name=x']}, 'must not contain --served-model-name'),
    ({'vllm_args': ['--tensor-parallel-size', '4']}, 'say --tensor-parallel-size 4 but tensor_parallel_size is 8'),
    ({'env': {'X': 1}}, 'env must be a dict of string to string'),
    ({'min_drvier': '1'}, "unknown key 'min_drvier'"),
    ({'min_driver': 'latest'}, "min_driver 'latest' is not a driver version"),
    ({'compute_caps': ['sm100']}, 'compute_caps must be a non-empty list'),
    ({'architecture': 'volta'}, "architecture 'volta' is not one of"),
    ({'mounts': [{'source': 'relative', 'target': '/x'}]}, 'mounts[0].source must be an absolute path'),
    ({'model': {'min_total_gpu_memory_mib': '651 GB'}}, 'min_total_gpu_memory_mib must be a positive integer'),
    ({'model': {'repo_id': 'no-owner'}}, 'model.repo_id must be "owner/name"'),
    ({'enabled': 'yes'}, 'enabled must be true or false'),
])
def test_table_validation_names_the_entry(table, override, expected):
    with pytest.raises(vt.VariantTableError) as err:
        select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides={'sm100': override})
    assert expected in str(err.value)
    assert 'sm100' in str(err.value)


# One bad key each (issue 37): the key that is wrong, and what the error says of it.
BAD_KEYS = {
    'unknown key': ({'min_drvier': '1'}, "unknown key 'min_drvier'"),
    'enabled': ({'enabled': 'yes'}, 'enabled must be true or false'),
    'priority': ({'priority': 'high'}, 'priority must be an integer'),
    'tensor_parallel_size': ({'tensor_parallel_size': '8'}, 'tensor_parallel_size must be an integer'),
    'compute_caps': ({'compute_caps': '10.0'}, 'compute_caps must be a non-empty list'),
    'architecture': ({'architecture': 'volta'}, "architecture 'volta' is not one of"),
    'min_driver': ({'min_driver': 'latest'}, "min_driver 'latest' is not a driver version"),
    'served_model_name': ({'served_model_name': 5}, 'served_model_name must be a non-empty string'),
    'image.reference': ({'image': {'reference': 'vllm/vllm-openai:v0.28.0'}}, 'is not fully qualified'),
    'model.revision': ({'model': {'revision': 'a b'}}, 'model.revision must be a branch, tag or commit'),
    'vllm_args': ({'vllm_args': '--port 8000'}, 'vllm_args must be a list of strings'),
    'mounts': ({'mounts': [{'source': 'relative', 'target': '/x'}]}, 'mounts[0].source must be an absolute path'),
}


@pytest.mark.parametrize('first,second', [(a, b) for i, a in enumerate(sorted(BAD_KEYS))
                                          for b in sorted(BAD_KEYS)[i + 1:]])
def test_every_bad_key_of_an_override_entry_is_reported_at_once(table, first, second):
    override = vt.deep_merge(BAD_KEYS[first][0], BAD_KEYS[second][0])
    with pytest.raises(vt.VariantTableError) as err:
        select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides={'sm100': override})
    errors = [e for e in err.value.errors if e.startswith("entry 'sm100': ")]
    for name in (first, second):
        assert sum(BAD_KEYS[name][1] in e for e in errors) == 1, (name, errors)
    assert len(errors) == 2, errors


def test_short_image_name_error_explains_f12(table):
    with pytest.raises(vt.VariantTableError) as err:
        vt.validate_table(vt.merge_table(table, {'sm100': {'image': {'reference': 'vllm/vllm-openai:v0.28.0'}}}), 1)
    assert 'short-name resolution enforced' in str(err.value)


def test_fully_qualified_references():
    assert vt.is_fully_qualified('docker.io/vllm/vllm-openai:v0.28.0')
    assert vt.is_fully_qualified('lab-registry:5000/vllm/stand-in:1')
    assert vt.is_fully_qualified('localhost/inkling-lab-host:trixie')
    assert not vt.is_fully_qualified('vllm/vllm-openai:v0.28.0')
    assert not vt.is_fully_qualified('ubuntu')


def test_schema_version_mismatch(table):
    with pytest.raises(vt.VariantTableError) as err:
        select(facts_from_rows(h200_rows(8)), BIG, 8, table, schema_version=2)
    assert 'schema_version 2' in str(err.value)


def test_override_that_is_not_a_dict(table):
    with pytest.raises(vt.VariantTableError) as err:
        vt.merge_table(table, {'sm100': 'off'})
    assert "override 'sm100' must be a dict" in str(err.value)


def test_deep_merge():
    base = {'a': {'b': 1, 'c': [1, 2]}, 'd': 1}
    merged = vt.deep_merge(base, {'a': {'c': [3]}, 'e': None})
    assert merged == {'a': {'b': 1, 'c': [3]}, 'd': 1, 'e': None}
    assert base == {'a': {'b': 1, 'c': [1, 2]}, 'd': 1}


# --------------------------------------------------------------------------
# structured refusals: which preflight check each reason belongs to
# --------------------------------------------------------------------------

def refusals(gpu, model, tp, table, **kwargs):
    with pytest.raises(vt.VariantRefused) as err:
        select(gpu, model, tp, table, **kwargs)
    assert [r['reason'] for r in err.value.refusals] == err.value.reasons
    return err.value.refusals


def test_refusal_splits_a_reason_into_message_and_remedy():
    ref = vt.refusal('gpu.count', 'web-01', 'web-01: found 7 GPU(s); need 8. Remedy: use a host with 8 GPUs.')
    assert ref == {'check': 'gpu.count', 'message': 'found 7 GPU(s); need 8', 'remedy': 'use a host with 8 GPUs',
                   'reason': 'web-01: found 7 GPU(s); need 8. Remedy: use a host with 8 GPUs.'}


def test_every_refusal_names_its_check(table):
    rows = h200_rows(7)
    rows[3]['mig.mode.current'] = 'Enabled'
    for row in rows:
        row['driver_version'] = '550.90.07'
    refs = refusals(facts_from_rows(rows), BIG, 8, table)
    assert [r['check'] for r in refs] == ['gpu.count', 'gpu.mig', 'driver.version']
    for ref in refs:
        assert ref['check'] in vt.REFUSAL_CHECKS
        assert ref['message'] and ref['remedy'] and 'Remedy' not in ref['message'], ref
        assert not ref['message'].startswith('gpu-node-01')
    assert refs[2]['remedy'] == 'upgrade the NVIDIA driver (and fabric manager, same version) to 580.65.06 or newer'


def test_memory_refusal_has_its_own_check_and_no_overrides_advice(table):
    refs = refusals(facts_from_rows(public_rows('h100-80gb-hbm3')), BIG, 8, table)
    assert [r['check'] for r in refs] == ['gpu.memory']
    assert refs[0]['message'] == ('the 8 GPU(s) of the tensor parallel group have 652472 MiB (637.2 GiB) in total; '
                                  'thinkingmachines/Inkling-NVFP4 (entry sm90-patched) needs at least 666624 MiB '
                                  '(651.0 GiB)')
    assert refs[0]['remedy'] == ('use GPUs with more memory (for example 8x H200 or 8x B200), or a smaller model; '
                                 'or group 2 identical hosts into a replica (host variable inkling_replica: <name> on '
                                 'each; docs/variants.md, "Multi-node replicas"): entry sm90-h100-2node serves '
                                 'thinkingmachines/Inkling-NVFP4 across 2 such hosts')


def test_table_reasons_stay_with_the_variant_check(table):
    gpu = facts_from_rows(h200_rows(8))
    gpu['compute_caps'] = ['8.0']
    assert [r['check'] for r in refusals(gpu, BIG, 8, table)] == ['variant']
    assert [r['check'] for r in refusals(facts_from_rows(h200_rows(8)), 'someone/Other-Model', 8, table)] == \
        ['variant']
    no_gpu = {'gpu_count': 0, 'gpus': [], 'compute_caps': [], 'driver_version': None}
    assert [r['check'] for r in refusals(no_gpu, BIG, 8, table)] == ['gpu.count']


def test_override_layers_merge_per_variant_and_per_key():
    from ansible_collections.inkling.fleet.plugins.module_utils.variant import merge_overrides
    fleet = {'sm90-patched': {'model': {'revision': 'a' * 40}, 'image': {'digest': 'sha256:' + '1' * 64}},
             'sm100': {'env': {'A': '1'}}}
    group = {'sm90-patched': {'env': {'X': '8'}, 'image': {'reference': 'reg/x:2'}}}
    host = {'sm90-patched': {'env': {'X': '9'}}}
    merged = merge_overrides([('inkling_variant_overrides', fleet), ('inkling_variant_overrides_gpu_h200', group),
                              ('inkling_variant_overrides_zz_host', host)])
    assert merged['sm90-patched'] == {'model': {'revision': 'a' * 40}, 'env': {'X': '9'},
                                      'image': {'digest': 'sha256:' + '1' * 64, 'reference': 'reg/x:2'}}
    assert merged['sm100'] == {'env': {'A': '1'}}
    assert fleet['sm90-patched'] == {'model': {'revision': 'a' * 40}, 'image': {'digest': 'sha256:' + '1' * 64}}


def test_a_bad_override_layer_is_named():
    from ansible_collections.inkling.fleet.plugins.module_utils.variant import merge_overrides, VariantTableError
    with pytest.raises(VariantTableError) as e:
        merge_overrides([('inkling_variant_overrides_gpu_h200', {'sm90-patched': 'x'})])
    assert e.value.errors == ["inkling_variant_overrides_gpu_h200: override 'sm90-patched' must be a dict, got str"]


def test_modalities_name_known_inputs_only(table):
    assert vt.validate_entry('sm100', table['sm100']) == []
    assert table['sm90-patched']['modalities'] == ['text', 'image', 'audio']
    entry = dict(table['sm100'], modalities=['text', 'video'])
    errors = vt.validate_entry('sm100', entry)
    assert errors == ["entry 'sm100': modalities: 'video' is not one of text, image, audio"]
    assert 'a list of strings' in vt.validate_entry('sm100', dict(table['sm100'], modalities='text'))[0]


@pytest.mark.parametrize('ref', ['registry.local/a/B:tag', 'quay.io/Org/vllm:1', 'quay.io/org/vllm:-bad',
                                 'vllm/vllm-openai:v0.28.0'])
def test_the_table_and_staging_agree_on_references(ref, table):
    """Play 0's table check and staging's parser are one: what staging refuses, the table refuses."""
    from ansible_collections.inkling.fleet.plugins.module_utils import image_ref
    with pytest.raises(image_ref.ImageRefError) as staged:
        image_ref.parse_reference(ref)
    assert not vt.is_fully_qualified(ref)
    with pytest.raises(vt.VariantTableError) as err:
        select(facts_from_rows(h200_rows(8)), BIG, 8, table, overrides={'sm90-patched': {'image': {'reference': ref}}})
    assert str(staged.value) in str(err.value)


# --- Remote code runs only from a pinned commit (issue 36, finding 6) ---------------------------------------

COMMIT = 'fedcba9876543210fedcba9876543210fedcba98'


@pytest.mark.parametrize('entry,expected', [
    ({'vllm_args': ['--trust-remote-code']}, True),
    ({'vllm_args': ['--trust-remote-code=True']}, True),
    ({'vllm_args': ['--trust-remote-code=false']}, False),
    ({'vllm_args': ['--trust-remote-code=0']}, False),
    ({'vllm_args': ['--tokenizer-mode', 'inkling']}, False),
    ({'vllm_args': [], 'node_args': {'worker': ['--headless', '--trust-remote-code']}}, True),   # a worker runs it too
    ({}, False),
])
def test_remote_code_is_found_in_vllm_args_and_node_args(entry, expected):
    assert vt.runs_remote_code(entry) is expected


def test_a_remote_code_entry_from_a_branch_is_named_with_its_remedy():
    entry = {'vllm_args': ['--trust-remote-code'], 'model': {'repo_id': 'org/name', 'revision': 'main'}}
    problem = vt.remote_code_problem('sm90-patched', entry)
    assert "entry 'sm90-patched'" in problem and 'org/name' in problem and "model.revision is 'main'" in problem
    assert 'inkling_variant_overrides: {sm90-patched: {model: {revision: <40-hex>}}}' in problem
    assert 'enabled: false' in problem
    for revision in (COMMIT.upper(), COMMIT[:12], 'v1.0', None):
        entry['model']['revision'] = revision
        assert vt.remote_code_problem('sm90-patched', entry)
    entry['model']['revision'] = COMMIT
    assert vt.remote_code_problem('sm90-patched', entry) is None
    assert vt.remote_code_problem('x', {'vllm_args': [], 'model': {'revision': 'main'}}) is None


def test_the_shipped_table_names_every_candidate_of_the_model_and_tp_size(table):
    names = [p.split("'")[1] for p in vt.unpinned_candidates(table, 'thinkingmachines/Inkling-NVFP4', 8)]
    assert names == sorted(n for n, e in table.items() if e.get('enabled', True) and vt.runs_remote_code(e)
                           and e['model']['repo_id'] == 'thinkingmachines/Inkling-NVFP4'
                           and e['tensor_parallel_size'] == 8)
    assert {'sm90-patched', 'sm100'} <= set(names)
    pinned = copy.deepcopy(table)
    for name in names:
        pinned[name]['model']['revision'] = COMMIT
    assert vt.unpinned_candidates(pinned, 'thinkingmachines/Inkling-NVFP4', 8) == []
    pinned[names[0]]['model']['revision'] = 'main'
    pinned[names[0]]['enabled'] = False                 # a disabled entry is never given to a host
    assert vt.unpinned_candidates(pinned, 'thinkingmachines/Inkling-NVFP4', 8) == []
