# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The variant table as a host's variables make it, on the controller: the collection's table
(``data/variants.yml``) or the host's ``preflight_variant_table``, with the override layers
``preflight_variant_overrides`` and every ``preflight_variant_overrides_<suffix>`` merged in name
order. The one place that reads the table file and merges the layers: the inkling_variant action
and rollout_validate both call ``inputs``. The rules themselves are module_utils/variant.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import os

import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import variant

TABLE_FILE = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', 'data', 'variants.yml'))
TABLE_VAR = 'preflight_variant_table'
SCHEMA_VAR = 'preflight_variant_table_schema_version'
OVERRIDES_VAR = 'preflight_variant_overrides'

_SHIPPED = {}


def shipped(path=TABLE_FILE):
    """(table, schema_version) of the collection's table file; a copy the caller may change."""
    if path not in _SHIPPED:
        with open(path) as f:
            # libyaml where present: the action reads the file once per host and task (a worker process)
            data = yaml.load(f, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))  # nosec B506: a safe loader
        _SHIPPED[path] = (data['variants'], data['schema_version'])
    table, schema = _SHIPPED[path]
    return copy.deepcopy(table), schema


def layer_names(names):
    """The override layers among a host's variable names, in the order they merge: the plain one
    first, then the suffixed ones by name."""
    names = set(names)
    suffixed = sorted(n for n in names if n.startswith(OVERRIDES_VAR + '_') and len(n) > len(OVERRIDES_VAR) + 1)
    return ([OVERRIDES_VAR] if OVERRIDES_VAR in names else []) + suffixed


def inputs(names, get, path=TABLE_FILE, layers=True):
    """(table, schema_version, overrides) for a host.

    ``names``: the host's variable names. ``get(name)``: the variable's value as the run templates
    it; it raises VariantTableError when the value cannot be resolved. A table or schema the host
    does not set (or sets to null) is the collection's. Raises VariantTableError naming a bad layer.
    ``layers=False``: the host's override layers are not read (overrides is {})."""
    table, schema = shipped(path)
    names = set(names)
    if TABLE_VAR in names:
        value = get(TABLE_VAR)
        table = table if value is None else value
    if SCHEMA_VAR in names:
        value = get(SCHEMA_VAR)
        schema = schema if value is None else value
    if not layers:
        return table, schema, {}
    return table, schema, variant.merge_overrides([(name, get(name)) for name in layer_names(names)])


def effective(names, get, path=TABLE_FILE):
    """(merged table, schema_version), validated: what inkling_variant would select from.
    Raises VariantTableError with every problem found."""
    table, schema, overrides = inputs(names, get, path)
    merged = variant.merge_table(table, overrides)
    variant.validate_table(merged, schema)
    return merged, schema
