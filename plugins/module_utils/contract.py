# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The deployment contract: one dict per host that says what the host is to serve.

The rollout playbook builds it once per host after preflight (``build``) and completes it
after staging with what staging pinned (``pin``): the image by digest, the model revision as
the hub's commit, the hub cache directory. The hf_cache, image and service roles take their
inputs from it as documented role parameters; no role reaches into another role's facts.
Its target keys (rollout.FINGERPRINT_KEYS) are also the input of the rollout's fingerprint,
which decides whether an interrupted rollout is resumed (docs/rollout.md).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DEFAULT_HUB_CACHE_DIR = '/var/lib/inkling/huggingface/hub'


class ContractError(ValueError):
    pass


def build(variant, host, hub_cache_dir=None):
    """The contract from the variant inkling.fleet.inkling_variant selected for ``host``."""
    if not isinstance(variant, dict) or not variant.get('name'):
        raise ContractError('%s: no variant selected (preflight did not publish preflight_variant)' % host)
    model = variant.get('model') or {}
    image = variant.get('image') or {}
    return {
        'host': host,
        'variant': variant['name'],
        'entry': variant,
        'repo_id': model.get('repo_id'),
        'revision': model.get('revision'),
        'image': image.get('reference'),
        'image_digest': image.get('digest'),
        'served_model_name': variant.get('served_model_name'),
        'vllm_args': list(variant.get('vllm_args') or []),
        'env': dict(variant.get('env') or {}),
        'tensor_parallel_size': variant.get('tensor_parallel_size'),
        'hub_cache_dir': hub_cache_dir or DEFAULT_HUB_CACHE_DIR,
        'auth_file': '',
        'staged': False,
    }


def pin(contract, image_pinned, snapshot, auth_file=None, check_mode=False):
    """The contract completed after staging: image by digest, revision as a commit, hub dir.
    In check mode staging pulls nothing: what it could not resolve stays as requested and is
    listed in ``unresolved`` (a new image tag is only pinned when it is pulled)."""
    if not contract:
        raise ContractError('no deployment contract to complete')
    out = dict(contract)
    host = out.get('host', '?')
    unresolved = []
    if (image_pinned or {}).get('pinned_reference') and '@sha256:' in image_pinned['pinned_reference']:
        out['image'] = image_pinned['pinned_reference']
        out['image_digest'] = image_pinned.get('digest')
    elif check_mode:
        unresolved.append('image %s (its digest is resolved when staging pulls it)' % out.get('image'))
    else:
        raise ContractError('%s: the image role published no pinned image (image_pinned.pinned_reference)' % host)
    revision = (snapshot or {}).get('revision') or ''
    if len(revision) == 40:
        out['revision'] = revision
    elif check_mode:
        unresolved.append('model revision %s (resolved when staging downloads it)' % out.get('revision'))
    else:
        raise ContractError('%s: the hf_cache role published no snapshot (hf_cache_snapshot.revision)' % host)
    out['unresolved'] = unresolved
    path = snapshot.get('path') or ''
    if '/models--' in path:
        out['hub_cache_dir'] = path.split('/models--', 1)[0]
    out['auth_file'] = auth_file or ''
    out['staged'] = True
    return out
