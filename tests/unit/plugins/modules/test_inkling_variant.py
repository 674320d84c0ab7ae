# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The inkling_variant module run as Ansible runs it."""

from inkling_test_helpers import capture_rows, default_table, facts_from_rows, h200_rows, run_module


def args(gpu, model, tp, **extra):
    table, version = default_table()
    result = {'gpu': gpu, 'model': model, 'tensor_parallel_size': tp, 'table': table, 'schema_version': version,
              'host': 'gpu-node-01'}
    result.update(extra)
    return result


def test_selects_and_returns_reasons(tmp_path):
    rc, result = run_module('inkling_variant', args(facts_from_rows(capture_rows()),
                                                    'thinkingmachines/Inkling-Small-NVFP4', 2), tmp_path=tmp_path,
                            check_mode=True)
    assert rc == 0, result
    assert result['changed'] is False
    assert result['variant']['name'] == 'sm90-small-tp2'
    assert result['reasons'][0].startswith('gpu-node-01: 2 GPU(s), compute capability 9.0')


def test_refusal_fails_with_every_reason(tmp_path):
    rc, result = run_module('inkling_variant', args(facts_from_rows(capture_rows()),
                                                    'thinkingmachines/Inkling-NVFP4', 8), tmp_path=tmp_path)
    assert rc == 1 and result['failed'] is True
    assert len(result['reasons']) == 2
    assert result['msg'].startswith('refused (2 reason(s)): gpu-node-01: ')
    assert 'variant' not in result
    # the same reasons, each with the preflight check it belongs to
    assert [r['check'] for r in result['refusals']] == ['gpu.count', 'gpu.memory']
    assert [r['reason'] for r in result['refusals']] == result['reasons']


def test_table_error(tmp_path):
    overrides = {'sm90-patched': {'image': {'reference': 'automation-vllm:cuda-29455473553'}}}
    rc, result = run_module('inkling_variant', args(facts_from_rows(h200_rows(8)), 'thinkingmachines/Inkling-NVFP4', 8,
                                                    overrides=overrides), tmp_path=tmp_path)
    assert rc == 1
    assert result['table_errors'] and 'sm90-patched' in result['table_errors'][0]
    assert 'not fully qualified' in result['msg']


def test_string_tensor_parallel_size_from_templating_is_converted(tmp_path):
    rc, result = run_module('inkling_variant', args(facts_from_rows(h200_rows(8)), 'thinkingmachines/Inkling-NVFP4',
                                                    '8', schema_version='1'), tmp_path=tmp_path)
    assert rc == 0, result
    assert result['variant']['name'] == 'sm90-patched'
