# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""image_trial: the arch rule, the skip rule, and the trial script run for real against the lab's stand-in
packages (lab/standin/site with the server as vllm._standin, as build-image.sh lays them out in the image),
then the module with a podman that runs the script in place of a container."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import image_trial as it
from inkling_test_helpers import REPO, run_module

STANDIN = os.path.join(REPO, 'lab', 'standin')
# What torch 2.11.0 + CUDA 13.0 printed on a real H200 machine (issue 18).
TORCH_211_CU130 = ['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120']
DIGEST = 'sha256:' + 'a' * 64
IMAGE = 'lab-registry:5000/inkling/vllm-standin@' + DIGEST
ENTRYPOINT = ['/usr/local/bin/vllm', 'serve']


@pytest.mark.parametrize('cap,arches,expected', [
    ('9.0', TORCH_211_CU130, ('native', 'sm_90')),
    ('10.0', TORCH_211_CU130, ('native', 'sm_100')),
    ('9.0', ['sm_75', 'sm_80', 'sm_86'], ('none', None)),
    ('8.6', ['sm_80'], ('compatible', 'sm_80')),
    ('9.0', ['sm_90a'], ('native', 'sm_90a')),
    ('10.3', ['sm_100a'], ('none', None)),          # arch-specific cubins run on exactly that capability
    ('10.3', ['sm_100f'], ('compatible', 'sm_100f')),
    ('10.0', ['sm_120', 'compute_90'], ('ptx', 'compute_90')),
    ('10.0', ['sm_120'], ('none', None)),
    # PTX is JIT-compiled upwards only: compute_100 cannot run on a 9.0 GPU, compute_90 can
    ('9.0', ['sm_100', 'compute_100'], ('none', None)),
    ('9.0', ['sm_100', 'compute_100', 'compute_90'], ('ptx', 'compute_90')),
    ('10.0', ['compute_103'], ('none', None)),
])
def test_arch_support(cap, arches, expected):
    assert it.arch_support(cap, arches) == expected


def test_skip_only_for_the_same_digest_and_arguments():
    args = ['--model', 'm', '--tensor-parallel-size', '8']
    assert it.should_skip(IMAGE, args, 'other/repo@' + DIGEST, list(args))
    assert not it.should_skip(IMAGE, args, 'x@sha256:' + 'b' * 64, list(args))
    assert not it.should_skip(IMAGE, args, IMAGE, args + ['--enforce-eager'])
    assert not it.should_skip(IMAGE, args, IMAGE, None)
    assert not it.should_skip('repo:tag', args, 'repo:tag', args)
    assert not it.should_skip(IMAGE, args, IMAGE, args, {'A': '1'}, {'A': '2'})
    assert it.should_skip(IMAGE, args, IMAGE, args, {'A': '1'}, {'A': 1})
    # an environment-only upgrade against a host whose recorded state has no environment (recorded
    # before the state file carried it) is tried, not skipped
    assert not it.should_skip(IMAGE, args, IMAGE, args, {'A': '1'}, None)
    assert it.should_skip(IMAGE, args, IMAGE, args, None, None)


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    """The stand-in's packages laid out as in the image."""
    root = tmp_path_factory.mktemp('standin-site')
    for package in ('vllm', 'torch'):
        shutil.copytree(os.path.join(STANDIN, 'site', package), str(root / package))
    shutil.copy(os.path.join(STANDIN, 'vllm'), str(root / 'vllm' / '_standin.py'))
    return str(root)


def trial(site, args, entrypoint=None, **env):
    run_env = dict(os.environ, PYTHONPATH=site)
    run_env.pop('STANDIN_TORCH_ARCH_FLAGS', None)
    run_env.update(env)
    payload = json.dumps({'args': args, 'entrypoint': entrypoint or ENTRYPOINT})
    proc = subprocess.run([sys.executable, '-c', it.TRIAL_SCRIPT, payload], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=run_env, timeout=60, check=False)
    return it.parse_output(proc.stdout.decode())


def unit_args(variant='sm90-patched'):
    with open(os.path.join(REPO, 'data', 'variants.yml')) as handle:
        table = yaml.safe_load(handle)['variants']
    return [str(a) for a in table[variant]['vllm_args']] + [
        '--model', 'thinkingmachines/Inkling-NVFP4', '--revision', 'c' * 40, '--served-model-name', 'inkling',
        '--host', '0.0.0.0', '--port', '8000', '--shutdown-timeout', '120']


def test_standin_answers_like_vllm_and_torch(site):
    answer = trial(site, unit_args())
    assert answer['args_ok'] is True, answer
    assert answer['parser'] == 'vllm.entrypoints.cli.main'
    assert answer['vllm_version'] == '0.0.0+inkling.standin'
    assert (answer['torch_version'], answer['cuda_version']) == ('0.0.0+inkling.standin', '13.0')
    assert answer['arch_list'] == TORCH_211_CU130
    assert it.judge('h1', IMAGE, answer, ['9.0'])['ok']


def test_every_variant_passes_the_standin(site):
    for variant in ('sm90-patched', 'sm90-upstream', 'sm100', 'sm90-small-tp2', 'sm100-small-tp2'):
        answer = trial(site, unit_args(variant))
        assert answer['args_ok'], (variant, answer)


def test_an_unknown_flag_is_refused_by_the_parser(site):
    answer = trial(site, unit_args() + ['--no-such-flag'])
    assert answer['args_ok'] is False
    assert answer['args_error'] == 'vllm serve: error: unrecognized arguments: --no-such-flag'
    verdict = it.judge('lab-h200-01', IMAGE, answer, ['9.0'])
    assert [f['check'] for f in verdict['failures']] == ['image.args']
    assert verdict['message'].splitlines() == [
        'image trial on lab-h200-01 failed for %s (vLLM 0.0.0+inkling.standin, PyTorch 0.0.0+inkling.standin, '
        'CUDA 13.0); the running server was not stopped:' % IMAGE,
        "- [image.args] vLLM 0.0.0+inkling.standin rejects the unit's arguments: vllm serve: error: unrecognized "
        "arguments: --no-such-flag; remedy: change the variant's vllm_args for this vLLM version "
        "(inkling_variant_overrides), or use an image whose vLLM accepts them"]


def test_an_image_without_the_hosts_arch_is_refused(site):
    answer = trial(site, unit_args(), STANDIN_TORCH_ARCH_FLAGS='sm_75 sm_80 sm_86')
    assert answer['arch_list'] == ['sm_75', 'sm_80', 'sm_86'] and answer['args_ok']
    verdict = it.judge('lab-h200-01', IMAGE, answer, ['9.0'])
    (failure,) = verdict['failures']
    assert failure['check'] == 'image.arch'
    assert failure['message'] == (
        'PyTorch 0.0.0+inkling.standin (CUDA 13.0) in the image was built for sm_75 sm_80 sm_86: no kernels for it '
        'for this host\'s compute capability 9.0 (sm_90); vLLM would fail after the stop with "no kernel image is '
        'available for execution on the device"')


def test_no_vllm_and_no_torch(tmp_path):
    answer = trial(str(tmp_path), ['--model', 'x'])
    assert 'torch_error' in answer and 'vllm_error' in answer
    verdict = it.judge('h1', IMAGE, answer, ['9.0'])
    assert [f['check'] for f in verdict['failures']] == ['image.torch', 'image.vllm']
    assert it.judge('h1', IMAGE, None, ['9.0'], rc=125, stderr='Error: no such image')['failures'][0]['message'] == \
        'the image did not run the trial (podman rc=125): Error: no such image'


FAKE_PODMAN = r'''#!%(python)s
# Test double: "podman image inspect" answers the stand-in's entrypoint; "podman run" runs the command in
# place of the container, with the image's ENV (tags oldarch) and the --env given, and PYTHONPATH at the site.
import json, os, subprocess, sys
args = sys.argv[1:]
if args[:2] == ['image', 'inspect']:
    if 'missing' in args[-1]:
        sys.stderr.write('Error: %%s: image not known\n' %% args[-1]); sys.exit(125)
    print(json.dumps(%(entrypoint)r)); sys.exit(0)
if args[0] == 'rm':
    sys.exit(0)
assert args[0] == 'run', args
env = dict(os.environ, PYTHONPATH=%(site)r)
env.pop('STANDIN_TORCH_ARCH_FLAGS', None)
i = 1
while args[i].startswith('--'):
    if args[i].startswith('--env='):
        key, value = args[i][len('--env='):].split('=', 1)
        env[key] = value
    assert args[i] != '--device', 'the trial must not ask for a GPU'
    i += 1
image, command = args[i], args[i + 1:]
if 'oldarch' in image:
    env['STANDIN_TORCH_ARCH_FLAGS'] = 'sm_75 sm_80 sm_86'
with open(%(log)r, 'a') as log:
    log.write(json.dumps(args[:i + 1]) + '\n')
sys.exit(subprocess.call([sys.executable] + command, env=env))
'''


@pytest.fixture
def podman(tmp_path, site):
    path = tmp_path / 'podman'
    log = tmp_path / 'podman.log'
    path.write_text(FAKE_PODMAN % {'python': sys.executable, 'entrypoint': ENTRYPOINT, 'site': site,
                                   'log': str(log)})
    path.chmod(0o755)
    return str(path), log


def module_args(podman_path, **over):
    args = {'host': 'lab-h200-01', 'image': IMAGE, 'args': unit_args(), 'compute_caps': ['9.0'],
            'env': {'HF_HUB_OFFLINE': '1', 'VLLM_ENGINE_READY_TIMEOUT_S': 3600}, 'podman_path': podman_path,
            'timeout': 60}
    args.update(over)
    return args


def test_module_passes_and_reports_versions(podman, tmp_path):
    rc, result = run_module('image_trial', module_args(podman[0]), tmp_path=tmp_path)
    assert rc == 0 and not result.get('failed'), result
    assert (result['vllm_version'], result['torch_version'], result['cuda_version']) == (
        '0.0.0+inkling.standin', '0.0.0+inkling.standin', '13.0')
    assert result['arch_support'] == {'9.0': {'kind': 'native', 'arch': 'sm_90'}}
    assert result['changed'] is False
    (call,) = [json.loads(line) for line in podman[1].read_text().splitlines()]
    assert call[:5] == ['run', '--rm', '--pull=never', '--network=none', '--entrypoint=python3']
    assert '--env=HF_HUB_OFFLINE=1' in call and '--env=VLLM_ENGINE_READY_TIMEOUT_S=3600' in call
    assert call[-1] == IMAGE


def test_module_refuses_oldarch_and_unknown_flags(podman, tmp_path):
    old = IMAGE.replace('vllm-standin', 'vllm-standin-oldarch')
    rc, result = run_module('image_trial', module_args(podman[0], image=old, compute_caps=['10.0']), tmp_path=tmp_path)
    assert result['failed'] and [f['check'] for f in result['failures']] == ['image.arch']
    assert 'compute capability 10.0 (sm_100)' in result['msg']
    rc, result = run_module('image_trial', module_args(podman[0], args=unit_args() + ['--no-such-flag']),
                            tmp_path=tmp_path)
    assert result['failed'] and result['args_error'] == 'vllm serve: error: unrecognized arguments: --no-such-flag'
    assert result['msg'].startswith('image trial on lab-h200-01 failed for %s' % IMAGE)


def test_module_skips_an_unchanged_unit_and_names_a_missing_image(podman, tmp_path):
    same = module_args(podman[0])
    rc, result = run_module('image_trial', module_args(podman[0], running_image=IMAGE, running_args=unit_args(),
                                                       running_env=dict(same['env'])), tmp_path=tmp_path)
    assert result['skipped'] is True and 'already uses %s' % DIGEST in result['msg']
    assert not podman[1].exists()
    # the running environment unknown (a state recorded without it): tried, not skipped
    rc, result = run_module('image_trial', module_args(podman[0], running_image=IMAGE, running_args=unit_args()),
                            tmp_path=tmp_path)
    assert rc == 0 and not result.get('skipped'), result
    assert podman[1].exists()
    podman[1].unlink()
    rc, result = run_module('image_trial', module_args(podman[0], image='x/missing@' + DIGEST), tmp_path=tmp_path)
    assert result['failed'] and 'is not on the host' in result['msg'] and 'image role' in result['msg']
