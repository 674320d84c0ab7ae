# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The deployment contract (plugins/module_utils/contract.py, filters deployment_contract and
deployment_pinned): built from the selected variant, completed with what staging pinned."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.filter.deployment import FilterModule
from ansible_collections.inkling.fleet.plugins.module_utils import contract, rollout

F = FilterModule().filters()
VARIANT = {'name': 'sm90-patched', 'model': {'repo_id': 'thinkingmachines/Inkling-NVFP4', 'revision': 'main'},
           'image': {'reference': 'quay.io/vllm/automation-vllm:cuda-29455473553', 'digest': None},
           'served_model_name': 'inkling', 'vllm_args': ['--tensor-parallel-size', '8'], 'env': {'A': '1'},
           'tensor_parallel_size': 8}
PINNED = {'reference': 'quay.io/vllm/automation-vllm:cuda-29455473553', 'digest': 'sha256:' + 'c' * 64,
          'pinned_reference': 'quay.io/vllm/automation-vllm@sha256:' + 'c' * 64}
SNAPSHOT = {'repo_id': 'thinkingmachines/Inkling-NVFP4', 'revision': 'd' * 40,
            'path': '/srv/hub/models--thinkingmachines--Inkling-NVFP4/snapshots/' + 'd' * 40}


def test_built_from_the_variant_then_pinned_by_staging():
    c = F['deployment_contract'](VARIANT, 'gpu-01')
    assert c['variant'] == 'sm90-patched' and c['entry'] is VARIANT and c['revision'] == 'main'
    assert c['image'] == VARIANT['image']['reference'] and c['image_digest'] is None and not c['staged']
    assert c['hub_cache_dir'] == contract.DEFAULT_HUB_CACHE_DIR
    p = F['deployment_pinned'](c, PINNED, SNAPSHOT, '/etc/inkling/registry-auth.json')
    assert p['image'] == PINNED['pinned_reference'] and p['image_digest'] == PINNED['digest']
    assert p['revision'] == 'd' * 40 and p['hub_cache_dir'] == '/srv/hub' and p['staged']
    assert p['auth_file'] == '/etc/inkling/registry-auth.json'
    assert c['image'] == VARIANT['image']['reference']  # the input is not modified


def test_the_fingerprint_follows_the_contract():
    one = F['deployment_contract'](VARIANT, 'gpu-01')
    other = F['deployment_contract'](dict(VARIANT, vllm_args=['--tensor-parallel-size', '4']), 'gpu-01')
    assert rollout.fingerprint({'a': one}) == rollout.fingerprint({'b': F['deployment_contract'](VARIANT, 'b')})
    assert rollout.fingerprint({'a': one}) != rollout.fingerprint({'a': other})


@pytest.mark.parametrize('args,message', [
    (({}, 'gpu-01'), 'gpu-01: no variant selected (preflight did not publish preflight_variant)'),
])
def test_no_variant_is_refused_naming_the_host(args, message):
    with pytest.raises(AnsibleFilterError, match=message.replace('(', r'\(').replace(')', r'\)')):
        F['deployment_contract'](*args)


def test_staging_that_published_nothing_is_refused():
    c = F['deployment_contract'](VARIANT, 'gpu-01')
    with pytest.raises(AnsibleFilterError, match='gpu-01: the image role published no pinned image'):
        F['deployment_pinned'](c, {}, SNAPSHOT)
    with pytest.raises(AnsibleFilterError, match='gpu-01: the hf_cache role published no snapshot'):
        F['deployment_pinned'](c, PINNED, {})


def test_check_mode_keeps_what_staging_has_not_resolved_yet():
    c = F['deployment_contract'](VARIANT, 'gpu-01')
    p = F['deployment_pinned'](c, {'reference': VARIANT['image']['reference'], 'pinned_reference': ''},
                               {'revision': ''}, None, True)
    assert p['image'] == VARIANT['image']['reference'] and p['image_digest'] is None
    assert p['unresolved'] == ['image quay.io/vllm/automation-vllm:cuda-29455473553 (its digest is resolved when '
                               'staging pulls it)', 'model revision main (resolved when staging downloads it)']
    with pytest.raises(AnsibleFilterError, match='published no pinned image'):
        F['deployment_pinned'](c, {'pinned_reference': ''}, SNAPSHOT, None, False)
