# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the canary analysis (plugins/module_utils/analysis.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.module_utils import analysis
from ansible_collections.inkling.fleet.plugins.plugin_utils import collection_data


def analysis_prompts(golden, extra=None):
    """The golden set the rollout asks: the inventory's whole set (``golden``), or when it is null
    the collection's (data/golden_set.yml), with the inventory's entries."""
    base = collection_data.golden_set() if golden is None else golden
    merged = analysis.merge_prompts(base, extra or [])
    problems = analysis.validate_prompts(merged)
    if problems:
        raise AnsibleFilterError('the golden set is not valid: ' + '; '.join(problems))
    return merged


def analysis_baseline(live, recorded, variant=None):
    """The old version's answers and load to compare with, or {} when there is none."""
    return analysis.choose_baseline(live or None, recorded or None, variant) or {}


def analysis_reference(result, variant=None, image_digest=None):
    """What the host keeps of a passed analysis in its state file."""
    return analysis.reference(result or None, variant, image_digest)


def analysis_compact(result):
    """The journal's copy of an analysis result ({} when none ran)."""
    if not isinstance(result, dict) or 'prompts' not in result or result.get('skipped'):
        return {}
    return analysis.compact(result)


class FilterModule(object):
    def filters(self):
        return {
            'analysis_prompts': analysis_prompts,
            'analysis_baseline': analysis_baseline,
            'analysis_reference': analysis_reference,
            'analysis_compact': analysis_compact,
        }
