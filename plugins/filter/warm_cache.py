# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of warm restarts: the compile cache key of a host, the seeds published so far (once per
batch) and the host a host's caches come from. Thin wrappers over plugins/module_utils/warm_cache.py
(docs/warm-restarts.md)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache


def cache_key(deployment, gpu):
    """The key, or {'id': '', 'error': why} when an input is missing (the host then starts cold)."""
    try:
        return warm_cache.key_from_facts(deployment, gpu)
    except warm_cache.KeyError_ as exc:
        return {'id': '', 'error': str(exc)}


def cache_seed_source(key, host, seeds, order):
    """{'host': source, 'url': ..., 'files': [...]} of the first other host in order whose published
    seed has the same key; {} when none (or when the key is unusable)."""
    if not (key or {}).get('id'):
        return {}
    seeds = dict((h, s) for h, s in (seeds or {}).items() if s)
    source = warm_cache.seed_source(host, key, seeds, list(order or []))
    if source is None:
        return {}
    return dict(seeds[source], host=source)


def cache_seed_table(seeds, order):
    """{'order': [hosts that published, in order], 'seeds': {host: seed}}: the seeds published so far,
    computed once per batch (run_once); each host then picks its source in it (cache_seed_source)."""
    return warm_cache.seed_table(dict(seeds or {}), list(order or []))


class FilterModule(object):
    def filters(self):
        return {'cache_key': cache_key, 'cache_seed_source': cache_seed_source, 'cache_seed_table': cache_seed_table}
