# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The deployment as a host's variables make it, on the controller: the model, the tensor
parallel size and the variant table - the collection's (``data/deployment.yml``,
``data/variants.yml``) or the host's ``inkling_variant_table`` - with the override layers
``inkling_variant_overrides`` and every ``inkling_variant_overrides_<suffix>`` merged in name order.

The one place that reads these variables: the inkling_variant action and rollout_validate call
``inputs`` and ``deployment``. The names of release 0.1 (``preflight_model``,
``preflight_tensor_parallel_size``, ``preflight_variant_table``, ``preflight_variant_overrides``
and its layers) are still read until ``REMOVED_IN``; ``deprecated`` names those a host sets. The
rules themselves are module_utils/variant.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils import variant
from ansible_collections.inkling.fleet.plugins.plugin_utils import collection_data

PREFIX = 'inkling_'
OLD_PREFIX = 'preflight_'
REMOVED_IN = '0.3.0'
MODEL_VAR = 'inkling_model'
TP_VAR = 'inkling_tensor_parallel_size'
TABLE_VAR = 'inkling_variant_table'
SCHEMA_VAR = 'inkling_variant_table_schema_version'
OVERRIDES_VAR = 'inkling_variant_overrides'
# the deployment's single-valued variables: a host sets each under one name
SINGLE = (MODEL_VAR, TP_VAR, TABLE_VAR, SCHEMA_VAR)


def old_name(name):
    """The release 0.1 name of a deployment variable (preflight_...)."""
    return OLD_PREFIX + name[len(PREFIX):]


def shipped():
    """(table, schema_version) of the collection's table file; a copy the caller may change."""
    data = collection_data.load('variants.yml')
    return data['variants'], data['schema_version']


def _layers(names, base):
    suffixed = sorted(n for n in names if n.startswith(base + '_') and len(n) > len(base) + 1)
    return ([base] if base in names else []) + suffixed


def layer_names(names):
    """The override layers among a host's variable names, in the order they merge (a later one
    wins): the deprecated preflight_ layers first, then the inkling_ ones; in each, the plain one
    first, then the suffixed ones by name."""
    names = set(names)
    return _layers(names, old_name(OVERRIDES_VAR)) + _layers(names, OVERRIDES_VAR)


def deprecated(names):
    """[(old name, new name)] of the release 0.1 names among a host's variable names."""
    names = set(names)
    found = [(old_name(n), n) for n in SINGLE if old_name(n) in names]
    base = old_name(OVERRIDES_VAR)
    return found + [(n, PREFIX + n[len(OLD_PREFIX):]) for n in _layers(names, base)]


def _pick(names, get, name):
    """The value of a single-valued deployment variable: its name, else its old name; None when
    the host sets neither (or sets it to null)."""
    for candidate in (name, old_name(name)):
        if candidate in names:
            value = get(candidate)
            if value is not None:
                return value
    return None


def conflicts(names, get):
    """Problems of a host that sets a variable under both names, to different values."""
    names = set(names)
    problems = []
    for name in SINGLE:
        if name in names and old_name(name) in names:
            new, old = get(name), get(old_name(name))
            if new is not None and old is not None and new != old:
                problems.append('%s and %s (its old name) are both set, to different values. Remedy: keep only %s'
                                % (name, old_name(name), name))
    return problems


def inputs(names, get, layers=True):
    """(table, schema_version, overrides) for a host.

    ``names``: the host's variable names. ``get(name)``: the variable's value as the run templates
    it; it raises VariantTableError when the value cannot be resolved. A table or schema the host
    does not set (or sets to null) is the collection's. Raises VariantTableError naming a bad layer.
    ``layers=False``: the host's override layers are not read (overrides is {})."""
    names = set(names)
    table, schema = shipped()
    value = _pick(names, get, TABLE_VAR)
    table = table if value is None else value
    value = _pick(names, get, SCHEMA_VAR)
    schema = schema if value is None else value
    if not layers:
        return table, schema, {}
    return table, schema, variant.merge_overrides([(name, get(name)) for name in layer_names(names)])


def deployment(names, get):
    """{model, tensor_parallel_size} for a host: its inkling_model and inkling_tensor_parallel_size
    (or their old names), else the collection's (data/deployment.yml)."""
    names = set(names)
    result = collection_data.deployment()
    for key, name in (('model', MODEL_VAR), ('tensor_parallel_size', TP_VAR)):
        value = _pick(names, get, name)
        if value is not None:
            result[key] = value
    return result


def effective(names, get):
    """(merged table, schema_version), validated: what inkling_variant would select from.
    Raises VariantTableError with every problem found."""
    table, schema, overrides = inputs(names, get)
    merged = variant.merge_table(table, overrides)
    variant.validate_table(merged, schema)
    return merged, schema
