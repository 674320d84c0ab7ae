# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The hardware-validation playbook's record of each case (documented in hardware_validation_cases.yml)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


def case_record(res):
    """One case from one loop result of inkling.fleet.inkling_variant (failed_when: false)."""
    item = res.get('item') or {}
    if res.get('skipped'):
        outcome = 'skipped'
    elif 'variant' in res:
        outcome = 'selected'
    else:
        outcome = 'refused'
    return {
        'name': item.get('name'),
        'model': item.get('model'),
        'tensor_parallel_size': item.get('tensor_parallel_size'),
        'expect': item.get('expect'),
        'expect_variant': item.get('expect_variant'),
        'outcome': outcome,
        'variant': res.get('variant'),
        'reasons': res.get('reasons') or [],
        'table_errors': res.get('table_errors') or [],
        'msg': res.get('msg'),
    }


def hardware_validation_cases(loop_result):
    """The cases of a registered loop (its ``results``), in order; [] when the loop did not run."""
    return [case_record(r) for r in (loop_result or {}).get('results') or []]


class FilterModule(object):
    def filters(self):
        return {'hardware_validation_cases': hardware_validation_cases}
