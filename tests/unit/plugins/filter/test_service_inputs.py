# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The service role's input checks (filter service_input_problems, plugins/module_utils/service.py): one
message per problem, and the same verdicts as the three asserts the role had before (rendered here by
Ansible's own templating, with the role's own expressions of that time)."""

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.inkling.fleet.plugins.filter.service import FilterModule
from ansible_collections.inkling.fleet.plugins.module_utils import service as svc

F = FilterModule().filters()['service_input_problems']
IMAGE = 'registry.example.com/vllm/vllm-openai@sha256:' + 'a' * 64
REV = 'b' * 40
VARIANT = {'name': 'sm90-patched', 'model': {'repo_id': 'thinkingmachines/Inkling-NVFP4'},
           'served_model_name': 'inkling', 'vllm_args': ['--tensor-parallel-size', '8'], 'tensor_parallel_size': 8}
# The role's defaults, as they render (roles/service/defaults/main.yml).
INPUTS = dict(service_variant=VARIANT, service_image=IMAGE, service_revision=REV, service_served_model_name='inkling',
              service_port=8000, service_host='0.0.0.0', service_timeout_start_s=4200,
              service_engine_ready_timeout_s=3600, service_drain_timeout_s=120, service_stop_timeout_s=135,
              service_timeout_stop_s=165, service_shutdown_timeout_flag='--shutdown-timeout',
              service_api_key='k', service_allow_no_api_key=False, inventory_hostname='gpu-01')


def problems(**over):
    v = dict(INPUTS, **over)
    return F(v['service_variant'], host=v['inventory_hostname'], image=v['service_image'],
             revision=v['service_revision'], served_model_name=v['service_served_model_name'], port=v['service_port'],
             listen=v['service_host'], timeout_start_s=v['service_timeout_start_s'],
             engine_ready_timeout_s=v['service_engine_ready_timeout_s'], drain_timeout_s=v['service_drain_timeout_s'],
             stop_timeout_s=v['service_stop_timeout_s'], timeout_stop_s=v['service_timeout_stop_s'],
             shutdown_timeout_flag=v['service_shutdown_timeout_flag'], api_key_set=len(v['service_api_key']) > 0,
             allow_no_api_key=v['service_allow_no_api_key'])


def test_good_inputs_have_no_problem():
    assert problems() == []
    assert problems(service_host='127.0.0.1', service_api_key='') == []
    assert problems(service_api_key='', service_allow_no_api_key=True) == []
    assert problems(service_port='8000', service_timeout_start_s='4200') == []


def test_bad_inputs_name_every_value_and_the_remedy():
    assert problems(service_image='quay.io/vllm/vllm-openai:latest') == [
        'gpu-01: service inputs invalid. Found variant=sm90-patched, repo_id=thinkingmachines/Inkling-NVFP4, '
        'image=quay.io/vllm/vllm-openai:latest, revision=' + REV + ', served_model_name=inkling, port=8000, '
        'TimeoutStartSec=4200 vs VLLM_ENGINE_READY_TIMEOUT_S=3600, drain/stop/TimeoutStopSec=120/135/165. '
        'Expected: a variant with name and model.repo_id (org/name) and a vllm_args list; an image fully qualified '
        "and pinned (registry/name@sha256:<64 hex>, from the image role's image_pinned.pinned_reference); a 40-hex "
        'revision (from hf_cache_snapshot.revision); TimeoutStartSec >= the engine-ready timeout; drain < stop '
        'timeout < TimeoutStopSec. Remedy: run preflight, hf_cache and image first, or set service_variant / '
        'service_image / service_revision explicitly.']


def test_no_api_key_beyond_loopback():
    assert problems(service_api_key='') == [
        'gpu-01: vLLM would listen on 0.0.0.0:8000 with no API key, open to anyone who reaches the host. Expected: '
        'service_api_key set (from vault), or service_host 127.0.0.1. Remedy: set service_api_key, or bind to '
        'loopback, or set service_allow_no_api_key: true if an authenticating gateway in front of the fleet is meant '
        'to be the only guard (docs/security.md).']


def test_the_roles_own_flags():
    variant = dict(VARIANT, vllm_args=['--port=8001', '--tensor-parallel-size', '8', '--shutdown-timeout', '5'])
    assert problems(service_variant=variant) == [
        'gpu-01: variant sm90-patched sets --port, --shutdown-timeout in vllm_args; the service role adds --model, '
        '--revision, --served-model-name, --host, --port, --api-key, --config, --shutdown-timeout itself (from '
        'service_* variables). Remove them from the variant (inkling_variant_overrides).']
    # without a drain flag, the variant may pass its own
    assert problems(service_variant=dict(VARIANT, vllm_args=['--shutdown-timeout', '5']),
                    service_shutdown_timeout_flag='') == []


def test_every_problem_at_once():
    found = problems(service_revision='main', service_api_key='',
                     service_variant=dict(VARIANT, vllm_args=['--model', 'x']))
    assert [p.split(' ')[1] for p in found] == ['service', 'vLLM', 'variant']
    # without a host, no prefix
    assert svc.input_problems(VARIANT, image=IMAGE, revision='main', served_model_name='x', port=1,
                              api_key_set=True)[0].startswith('service inputs invalid. Found variant=sm90-patched')


# --- the same verdicts as the role's three asserts before (commit 55cc941) --------------------------------------

OLD_NAMES = {
    '__service_variant_name': "{{ service_variant.name | default('') }}",
    '__service_repo_id': "{{ (service_variant.model | default({})).repo_id | default('') }}",
    '__service_reserved_flags': "{{ ['--model', '--revision', '--served-model-name', '--host', '--port', '--api-key', "
                                "'--config'] + ([service_shutdown_timeout_flag] if service_shutdown_timeout_flag "
                                "| length > 0 else []) }}",
}
OLD_INPUTS = [
    "__service_variant_name | length > 0",
    "__service_repo_id is match('^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$')",
    "service_variant.vllm_args | default([]) is sequence",
    "service_variant.vllm_args | default([]) is not string",
    r"service_image is match('^[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[^@\s]+@sha256:[0-9a-f]{64}$')",
    "service_revision is match('^[0-9a-f]{40}$')",
    "service_served_model_name | length > 0",
    "service_port | int > 0 and service_port | int < 65536",
    "service_timeout_start_s | int >= service_engine_ready_timeout_s | int",
    "service_stop_timeout_s | int > service_drain_timeout_s | int",
    "service_timeout_stop_s | int > service_stop_timeout_s | int",
]
OLD_KEY = ("service_api_key | length > 0 or service_allow_no_api_key | bool "
           "or service_host | string in ['127.0.0.1', '::1', 'localhost']")
OLD_CLASH = ("service_variant.vllm_args | default([]) | map('regex_replace', '=.*$', '') "
             "| select('in', __service_reserved_flags) | list | length == 0")

CASES = [
    {},
    {'service_variant': dict(VARIANT, name='')},
    {'service_variant': dict((k, v) for k, v in VARIANT.items() if k != 'name')},
    {'service_variant': dict(VARIANT, model={'repo_id': 'no-slash'})},
    {'service_variant': dict(VARIANT, model={'repo_id': '-org/name'})},
    {'service_variant': dict(VARIANT, model={})},
    {'service_variant': dict((k, v) for k, v in VARIANT.items() if k != 'vllm_args')},
    {'service_variant': dict(VARIANT, vllm_args='--tensor-parallel-size 8')},
    {'service_variant': dict(VARIANT, vllm_args=None)},
    {'service_variant': dict(VARIANT, vllm_args=['--served-model-name=x'])},
    {'service_variant': dict(VARIANT, vllm_args=['--api-key', 'k', '--config', 'c'])},
    {'service_variant': dict(VARIANT, vllm_args=['--portable', '--hostname'])},
    {'service_variant': dict(VARIANT, vllm_args=['--shutdown-timeout', '1']), 'service_shutdown_timeout_flag': ''},
    {'service_image': 'registry.example.com/vllm@sha256:' + 'A' * 64},
    {'service_image': 'vllm/vllm-openai@sha256:' + 'a' * 64},
    {'service_image': 'registry.example.com:5000/vllm/vllm-openai@sha256:' + 'a' * 64},
    {'service_image': 'Registry.example.com/vllm@sha256:' + 'a' * 64},
    {'service_image': 'registry.example.com/vllm:tag'},
    {'service_revision': 'B' * 40},
    {'service_revision': 'b' * 39},
    {'service_revision': 'main'},
    {'service_served_model_name': ''},
    {'service_port': 0},
    {'service_port': 65535},
    {'service_port': 65536},
    {'service_port': '8000'},
    {'service_port': 'http'},
    {'service_timeout_start_s': 3599},
    {'service_timeout_start_s': '3600'},
    {'service_stop_timeout_s': 120},
    {'service_timeout_stop_s': 135},
    {'service_timeout_stop_s': '165.0'},
    {'service_api_key': ''},
    {'service_api_key': '', 'service_host': '127.0.0.1'},
    {'service_api_key': '', 'service_host': '::1'},
    {'service_api_key': '', 'service_host': 'localhost'},
    {'service_api_key': '', 'service_host': '127.0.0.2'},
    {'service_api_key': '', 'service_allow_no_api_key': True},
    {'service_api_key': '', 'service_allow_no_api_key': 'yes'},
    {'service_api_key': '', 'service_allow_no_api_key': 'no'},
    {'service_revision': 'main', 'service_api_key': '', 'service_variant': dict(VARIANT, vllm_args=['--port', '1'])},
]


def render(variables, expr):
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template('{{ %s }}' % expr))


def old_verdicts(over):
    variables = dict(INPUTS, **over)
    for name, expr in OLD_NAMES.items():
        variables[name] = render(variables, expr[3:-3])
    inputs_ok = all(render(variables, cond) for cond in OLD_INPUTS)
    key_ok = render(variables, OLD_KEY)
    # the role ran its asserts in turn: the flags were looked at only with a list of vllm_args
    clash_ok = render(variables, OLD_CLASH) if inputs_ok or svc.is_sequence(
        variables['service_variant'].get('vllm_args', [])) else True
    return inputs_ok, key_ok, clash_ok


@pytest.mark.parametrize('over', CASES, ids=[','.join('%s=%r' % kv for kv in sorted(c.items()))[:60] or 'defaults'
                                             for c in CASES])
def test_same_verdicts_as_the_roles_asserts(over):
    inputs_ok, key_ok, clash_ok = old_verdicts(over)
    allow = over.get('service_allow_no_api_key', False)
    over = dict(over, service_allow_no_api_key=str(allow).lower() in ('true', 'yes', '1', 'on'))
    found = problems(**over)
    assert any('service inputs invalid' in p for p in found) == (not inputs_ok), found
    assert any('with no API key' in p for p in found) == (not key_ok), found
    assert any('in vllm_args; the service role adds' in p for p in found) == (not clash_ok), found
