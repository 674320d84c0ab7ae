# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filter merging variant override layers (plugins/module_utils/variant.py, merge_overrides)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.module_utils import variant


def merge_variant_overrides(values, names):
    try:
        return variant.merge_overrides(list(zip(names, values)))
    except variant.VariantTableError as e:
        raise AnsibleFilterError('; '.join(e.errors))


class FilterModule(object):
    def filters(self):
        return {'merge_variant_overrides': merge_variant_overrides}
