# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of preflight's staging-space check: which revisions the controller reads from the hub once, and each
host's file list among the answers (documented in staging_revisions.yml and staging_files_for.yml beside this
file; the decisions are pure functions of ``plugins/module_utils/hf_cache.py``)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache


def staging_revisions(variants):
    return hf_cache.staging_revisions(list(variants or []))


def staging_files_for(results, variant):
    return hf_cache.staging_files_for(list(results or []), variant)


class FilterModule(object):
    def filters(self):
        return {'staging_revisions': staging_revisions, 'staging_files_for': staging_files_for}
