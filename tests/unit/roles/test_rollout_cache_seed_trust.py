# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Seeding compile caches from a host whose container runs remote model code is opt-in (issue 36, finding 3):
roles/rollout/vars/main.yml's __rollout_cache_seeding, rendered as Ansible renders it."""

import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def seeding(seed, remote_code_ok, vllm_args):
    with open(os.path.join(REPO, 'roles', 'rollout', 'vars', 'main.yml')) as f:
        expr = yaml.safe_load(f)['__rollout_cache_seeding']
    out = Templar(loader=DataLoader(), variables={
        'rollout_cache_seed': seed, 'rollout_cache_seed_remote_code': remote_code_ok,
        'rollout_deployment': {'vllm_args': vllm_args}}).template(trust_as_template(expr))
    return str(out).strip() == 'True'


@pytest.mark.parametrize('seed,remote_code_ok,args,expected', [
    (True, False, ['--trust-remote-code', '--tensor-parallel-size', '8'], False),   # the default for Inkling
    (True, True, ['--trust-remote-code'], True),                                   # opted in
    (True, False, ['--tensor-parallel-size', '8'], True),                          # no remote code
    (False, True, ['--tensor-parallel-size', '8'], False),                         # seeding off
])
def test_seeding_from_a_remote_code_host_needs_the_opt_in(seed, remote_code_ok, args, expected):
    assert seeding(seed, remote_code_ok, args) is expected


def test_the_default_is_off_for_the_shipped_inkling_variants():
    with open(os.path.join(REPO, 'roles', 'rollout', 'defaults', 'main', 'main.yml')) as f:
        defaults = yaml.safe_load(f)
    with open(os.path.join(REPO, 'data', 'variants.yml')) as f:
        variants = yaml.safe_load(f)
    table = variants['variants']
    args = [a for v in (table.values() if isinstance(table, dict) else table) for a in v.get('vllm_args', [])]
    assert '--trust-remote-code' in args
    assert defaults['rollout_cache_seed_remote_code'] is False
    assert not seeding(defaults['rollout_cache_seed'], defaults['rollout_cache_seed_remote_code'], args)
