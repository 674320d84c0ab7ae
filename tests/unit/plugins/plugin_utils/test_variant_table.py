# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""plugins/plugin_utils/variant_table.py: the one place that reads the deployment variables, the
collection's variant table and a host's override layers (the inkling_variant action and
rollout_validate call it), with the names of release 0.1 read until 0.3.0."""

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils.variant import VariantTableError
from ansible_collections.inkling.fleet.plugins.plugin_utils import variant_table as vt

DIGEST_A = 'sha256:' + 'a' * 64
DIGEST_B = 'sha256:' + 'b' * 64


def getter(values):
    def get(name):
        value = values[name]
        if isinstance(value, Exception):
            raise value
        return value
    return get


def test_the_shipped_table_is_the_data_file_and_a_fresh_copy_each_time():
    table, schema = vt.shipped()
    assert schema == 1 and 'sm90-patched' in table and 'sm100' in table
    table['sm90-patched']['priority'] = -1
    assert vt.shipped()[0]['sm90-patched']['priority'] != -1


def test_layers_merge_plain_first_then_suffixed_by_name():
    names = ['inkling_variant_overrides_zz', 'inkling_variant_overrides', 'inkling_variant_overrides_aa',
             'inkling_variant_overrides_', 'inkling_variant_table_schema_version', 'other']
    assert vt.layer_names(names) == ['inkling_variant_overrides', 'inkling_variant_overrides_aa',
                                     'inkling_variant_overrides_zz']


def test_inputs_merge_the_layers_in_order_later_wins():
    values = {'inkling_variant_overrides': {'sm90-patched': {'image': {'digest': DIGEST_A}, 'priority': 3}},
              'inkling_variant_overrides_site': {'sm90-patched': {'image': {'digest': DIGEST_B}}}}
    table, schema, overrides = vt.inputs(values, getter(values))
    assert table == vt.shipped()[0] and schema == 1
    assert overrides == {'sm90-patched': {'image': {'digest': DIGEST_B}, 'priority': 3}}


def test_a_host_table_replaces_the_shipped_one_and_null_keeps_it():
    own = {'mine': {'enabled': True}}
    assert vt.inputs({'inkling_variant_table': own}, getter({'inkling_variant_table': own}))[0] == own
    values = {'inkling_variant_table': None, 'inkling_variant_table_schema_version': None}
    table, schema, overrides = vt.inputs(values, getter(values))
    assert (table, schema, overrides) == (vt.shipped()[0], 1, {})
    values = {'inkling_variant_table_schema_version': 2}
    assert vt.inputs(values, getter(values))[1] == 2


def test_a_bad_layer_is_named():
    values = {'inkling_variant_overrides_site': ['not', 'a', 'dict']}
    with pytest.raises(VariantTableError) as exc:
        vt.inputs(values, getter(values))
    assert exc.value.errors == ['inkling_variant_overrides_site must be a dict keyed by variant name, got list']


def test_an_unresolvable_variable_raises_what_the_getter_says():
    values = {'inkling_variant_overrides': VariantTableError(["inkling_variant_overrides cannot be resolved: x"])}
    with pytest.raises(VariantTableError) as exc:
        vt.inputs(values, getter(values))
    assert exc.value.errors == ['inkling_variant_overrides cannot be resolved: x']


def test_effective_merges_and_validates():
    values = {'inkling_variant_overrides': {'sm90-patched': {'image': {'digest': DIGEST_A}}}}
    merged, schema = vt.effective(values, getter(values))
    assert merged['sm90-patched']['image']['digest'] == DIGEST_A and schema == 1
    values = {'inkling_variant_overrides': {'sm90-patched': {'image': {'reference': 'automation-vllm:cuda-1'}}}}
    with pytest.raises(VariantTableError) as exc:
        vt.effective(values, getter(values))
    assert any('not fully qualified' in e for e in exc.value.errors)


def test_without_layers_the_host_layers_are_not_read():
    values = {'inkling_variant_overrides': VariantTableError(['must not be read'])}
    assert vt.inputs(values, getter(values), layers=False)[2] == {}


def test_the_old_layers_merge_first_and_the_new_ones_win():
    names = ['inkling_variant_overrides_site', 'preflight_variant_overrides_site', 'inkling_variant_overrides',
             'preflight_variant_overrides']
    assert vt.layer_names(names) == ['preflight_variant_overrides', 'preflight_variant_overrides_site',
                                     'inkling_variant_overrides', 'inkling_variant_overrides_site']
    values = {'preflight_variant_overrides_site': {'sm90-patched': {'image': {'digest': DIGEST_A}, 'priority': 3}},
              'inkling_variant_overrides': {'sm90-patched': {'image': {'digest': DIGEST_B}}}}
    assert vt.inputs(values, getter(values))[2] == {'sm90-patched': {'image': {'digest': DIGEST_B}, 'priority': 3}}


def test_the_deployment_is_the_new_name_else_the_old_one_else_the_collections():
    assert vt.deployment([], getter({})) == {'model': 'thinkingmachines/Inkling-NVFP4', 'tensor_parallel_size': 8}
    values = {'preflight_model': 'org/old', 'preflight_tensor_parallel_size': 4}
    assert vt.deployment(values, getter(values)) == {'model': 'org/old', 'tensor_parallel_size': 4}
    values = dict(values, inkling_model='org/new', inkling_tensor_parallel_size=None)
    assert vt.deployment(values, getter(values)) == {'model': 'org/new', 'tensor_parallel_size': 4}
    own = {'mine': {'enabled': True}}
    values = {'preflight_variant_table': own, 'preflight_variant_table_schema_version': 2}
    assert vt.inputs(values, getter(values))[:2] == (own, 2)


def test_the_old_names_a_host_sets_are_named_with_their_new_ones():
    names = ['preflight_model', 'inkling_tensor_parallel_size', 'preflight_variant_overrides_site',
             'preflight_variant_table', 'preflight_variant_overrides', 'other']
    assert vt.deprecated(names) == [
        ('preflight_model', 'inkling_model'), ('preflight_variant_table', 'inkling_variant_table'),
        ('preflight_variant_overrides', 'inkling_variant_overrides'),
        ('preflight_variant_overrides_site', 'inkling_variant_overrides_site')]
    assert vt.deprecated(['inkling_model', 'inkling_variant_overrides_x']) == []


def test_both_names_set_to_different_values_is_a_problem_the_same_value_is_not():
    values = {'inkling_model': 'org/a', 'preflight_model': 'org/b', 'inkling_tensor_parallel_size': 8,
              'preflight_tensor_parallel_size': 8}
    assert vt.conflicts(values, getter(values)) == [
        'inkling_model and preflight_model (its old name) are both set, to different values. Remedy: keep only '
        'inkling_model']
