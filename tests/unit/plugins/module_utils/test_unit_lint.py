# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Unit tests for plugins/module_utils/unit_lint.py (render + lint + tool output parsing).

The F-numbers are the field failures of docs/field-failures.md; each test input reproduces
the incident described there, and each has a passing counterpart so the check cannot pass vacuously.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import unit_lint as ul

DIGEST_IMAGE = 'registry.example.com/vllm/vllm-openai@sha256:' + 'a' * 64


def spec(**over):
    base = dict(
        name='inkling-vllm', description='vLLM', image=DIGEST_IMAGE,
        args=['--tensor-parallel-size', '8', '--kernel-config', '{"enable_flashinfer_autotune": false}',
              '--model', 'thinkingmachines/Inkling-NVFP4', '--port', '8000'],
        env={'HF_HUB_CACHE': '/hub', 'HF_HUB_OFFLINE': '1', 'VLLM_ENGINE_READY_TIMEOUT_S': '3600'},
        volumes=[{'source': '/var/lib/inkling/huggingface/hub', 'target': '/hub', 'options': 'ro'},
                 {'source': '/var/lib/inkling/cache/x', 'target': '/var/cache/inkling', 'options': 'rw'}],
        devices=['nvidia.com/gpu=all'], podman_args=['--ipc=host'], network='host', label_disable=True,
        secrets=[], timeout_start_s=4200, timeout_stop_s=150, stop_timeout_s=135, restart_sec=30,
        start_limit_burst=3, start_limit_interval_s=12690,
    )
    base.update(over)
    return base


def lint(content, kind='quadlet', **kw):
    kw.setdefault('model_params_b', 975)
    return ul.lint_unit(content, kind=kind, **kw)


# --- rendering ---------------------------------------------------------------

def test_render_quadlet_passes_own_lint():
    text = ul.render_quadlet(spec(), podman_version=(5, 4, 2))
    assert lint(text, podman_version=(5, 4, 2), min_timeout_start_s=3600) == []
    sections = ul.parse_unit(text)
    keys = [k for k, dummy in sections['Container']]
    assert 'Pull' in keys and ('Pull', 'never') in sections['Container']
    assert ('AddDevice', 'nvidia.com/gpu=all') in sections['Container']
    assert ('PodmanArgs', '--ipc=host') in sections['Container']
    assert ('TimeoutStartSec', '4200') in sections['Service']
    assert ('Restart', 'on-failure') in sections['Service']
    assert ('StartLimitBurst', '3') in sections['Unit']


def test_render_quadlet_old_podman_uses_podman_args_for_pull_and_secret():
    text = ul.render_quadlet(spec(secrets=[{'name': 'k', 'target': 'VLLM_API_KEY'}]), podman_version=(4, 4, 1))
    sections = ul.parse_unit(text)
    keys = [k for k, dummy in sections['Container']]
    assert 'Pull' not in keys and 'Secret' not in keys
    assert ('PodmanArgs', '--pull=never') in sections['Container']
    assert ('PodmanArgs', '--secret=k,type=env,target=VLLM_API_KEY') in sections['Container']
    assert lint(text, podman_version=(4, 4, 1)) == []


def test_render_quadlet_new_podman_uses_secret_key():
    text = ul.render_quadlet(spec(secrets=[{'name': 'k', 'target': 'VLLM_API_KEY'}]), podman_version=(5, 0, 0))
    assert 'Secret=k,type=env,target=VLLM_API_KEY' in text


def test_a_mount_secret_is_a_root_only_file_in_every_rendering():
    sec = [{'name': 'inkling-vllm-api-key', 'type': 'mount', 'target': '/run/secrets/inkling-vllm-api-key.yaml'}]
    want = 'inkling-vllm-api-key,type=mount,target=/run/secrets/inkling-vllm-api-key.yaml,mode=0400'
    assert 'Secret=%s' % want in ul.render_quadlet(spec(secrets=sec), podman_version=(5, 4, 0))
    assert ('PodmanArgs', '--secret=%s' % want) in ul.parse_unit(
        ul.render_quadlet(spec(secrets=sec), podman_version=(4, 4, 1)))['Container']
    assert '--secret=%s' % want in ul.render_systemd(spec(secrets=sec))


@pytest.mark.parametrize('sec', [
    {'name': 'k', 'type': 'mount', 'target': 'relative.yaml'},
    {'name': 'k', 'type': 'mount', 'target': '/run/secrets/../../etc/x'},
    {'name': 'k', 'type': 'mount', 'target': '/run/secrets/k.yaml', 'mode': 'rw'},
    {'name': 'k,type=env', 'target': 'X'},
    {'name': 'k', 'target': 'NOT-A-VARIABLE'},
])
def test_a_secret_that_podman_would_read_otherwise_is_refused(sec):
    with pytest.raises(ul.UnitLintError):
        ul.render_quadlet(spec(secrets=[sec]), podman_version=(5, 4, 0))


def test_render_quotes_json_and_escapes_percent():
    text = ul.render_quadlet(spec(args=['--x', '{"a": 1}', '--y', '50%']), podman_version=(5, 4, 0))
    exec_line = [v for k, v in ul.parse_unit(text)['Container'] if k == 'Exec'][0]
    assert exec_line == '--x \'{"a": 1}\' --y 50%%'


def test_render_systemd_plain_unit():
    text = ul.render_systemd(spec())
    sections = ul.parse_unit(text)
    start = dict(sections['Service'])['ExecStart']
    assert start.startswith('/usr/bin/podman run --name inkling-vllm --cidfile=%t/%N.cid')
    assert '--pull=never' in start and '--ipc=host' in start and '--device=nvidia.com/gpu=all' in start
    assert '--security-opt=label=disable' in start
    assert start.index(DIGEST_IMAGE) < start.index('--tensor-parallel-size')
    assert lint(text, kind='systemd', podman_version=(4, 3, 1)) == []


def test_render_systemd_refuses_quadlet_options():
    with pytest.raises(ul.UnitLintError):
        ul.render_systemd(spec(quadlet_options=['ShmSize=64g']))


@pytest.mark.parametrize('bad', [
    dict(name='bad name'), dict(env={'BAD-NAME': '1'}), dict(env={'A': 'x\ny'}), dict(args=['a\nb']),
    dict(image=''), dict(quadlet_options=['[Service]']), dict(quadlet_options=['Foo=1\nBar=2']),
])
def test_validate_spec_rejects(bad):
    with pytest.raises(ul.UnitLintError):
        ul.render_quadlet(spec(**bad))


# --- F8: /dev/shm at TP > 1 -----------------------------------------------------

F8_BAD = """[Container]
Image=%s
Pull=never
AddDevice=nvidia.com/gpu=all
Exec=--model /models/big-moe --tensor-parallel-size 8
[Service]
TimeoutStartSec=7200
""" % DIGEST_IMAGE


def test_f8_tp8_without_ipc_host_fails():
    errors = lint(F8_BAD, model_params_b=None)
    assert len(errors) == 1
    assert 'tensor_parallel_size=8' in errors[0] and '--ipc=host' in errors[0]


def test_f8_passes_with_ipc_host_or_big_shm_and_tp1():
    assert lint(F8_BAD + '[Container]\nPodmanArgs=--ipc=host\n', model_params_b=None) == []
    assert lint(F8_BAD + '[Container]\nShmSize=64g\n', model_params_b=None) == []
    assert len(lint(F8_BAD + '[Container]\nShmSize=1g\n', model_params_b=None)) == 1
    assert lint(F8_BAD.replace('size 8', 'size 1'), model_params_b=None) == []


def test_f8_plain_unit():
    bad = ul.render_systemd(spec(podman_args=[]))
    assert any('tensor_parallel_size=8' in e for e in lint(bad, kind='systemd'))


# --- F9: read-only hub cache without offline mode ---------------------------------

F9_BAD = """[Container]
Image=%s
Pull=never
Volume=/srv/hf-cache/hub:/root/.cache/huggingface/hub:ro
Environment=HF_HUB_CACHE=/root/.cache/huggingface/hub
Exec=--model org/big-moe-975b
[Service]
TimeoutStartSec=7200
""" % DIGEST_IMAGE


def test_f9_read_only_hub_needs_offline():
    errors = lint(F9_BAD, model_params_b=None)
    assert errors == ['read-only hub cache /root/.cache/huggingface/hub requires HF_HUB_OFFLINE=1 '
                      '(else huggingface_hub writes into it: [Errno 30] Read-only file system, F9)']
    assert lint(F9_BAD.replace('Exec=', 'Environment=HF_HUB_OFFLINE=1\nExec='), model_params_b=None) == []


def test_f9_hub_cache_env_must_point_at_mount():
    text = F9_BAD.replace('Environment=HF_HUB_CACHE=/root/.cache/huggingface/hub',
                          'Environment=HF_HUB_OFFLINE=1 HF_HUB_CACHE=/elsewhere')
    assert any('does not point at' in e for e in lint(text, model_params_b=None))


def test_f9_rw_hub_mount_is_not_flagged():
    assert lint(F9_BAD.replace(':ro', ':rw'), model_params_b=None) == []


# --- F13: keys the installed podman does not know ---------------------------------

F13 = """[Container]
Image=%s
Pull=never
AddDevice=nvidia.com/gpu=all
[Service]
TimeoutStartSec=7200
""" % DIGEST_IMAGE


def test_f13_pull_key_on_podman_45():
    errors = lint(F13, podman_version=(4, 5, 1), model_params_b=None)
    assert errors == ["quadlet on podman 4.5.1 does not know key 'Pull' in [Container] (needs >= 4.6); "
                      "the unit would not be generated"]
    assert lint(F13, podman_version=(4, 6, 0), model_params_b=None) == []


def test_f13_no_quadlet_below_44():
    errors = lint(F13, podman_version=(4, 3, 1), model_params_b=None)
    assert len(errors) == 1 and 'has no quadlet' in errors[0]


def test_f13_dryrun_old_format_unsupported_key():
    err = ("quadlet-generator[812]: Error converting 'vllm.container', ignoring: unsupported key 'Pull' "
           "in group 'Container' in /etc/containers/systemd/vllm.container")
    generated, errors = ul.parse_quadlet_dryrun(0, '', err, 'vllm.container')
    assert generated is None
    assert errors[0].startswith("Error converting 'vllm.container', ignoring: unsupported key 'Pull'")
    assert errors[1] == 'quadlet generated no vllm.service from vllm.container (rc=0)'


def test_f13_dryrun_podman5_format():
    # Captured from podman 5.4.2 (Debian trixie) with Bogus=1 in [Container].
    err = ('quadlet-generator[15]: Loading source unit file /tmp/q/x.container\n'
           'quadlet-generator[15]: converting "x.container": unsupported key \'Bogus\' in group '
           '\'Container\' in /tmp/q/x.container\n')
    generated, errors = ul.parse_quadlet_dryrun(1, '', err, 'x.container')
    assert generated is None
    assert errors[0] == ('converting "x.container": unsupported key \'Bogus\' in group \'Container\' '
                         'in /tmp/q/x.container')


def test_dryrun_ok_returns_generated_service():
    out = '---other.service---\n[Unit]\nA=1\n\n---x.service---\n[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n'
    generated, errors = ul.parse_quadlet_dryrun(0, out, 'quadlet-generator[3]: Loading source unit file /q/x.container\n',
                                                'x.container')
    assert errors == []
    assert generated.startswith('[Unit]\nDescription=x')
    assert 'A=1' not in generated


def test_systemd_verify_unknown_key_is_an_error_other_units_are_not():
    err = ('/tmp/v/x.service:14: Unknown key \'Notify\' in section [Service], ignoring.\n'
           'other.service: Command /nonexistent is not executable: No such file or directory\n')
    assert ul.parse_systemd_verify(0, '', err, '/tmp/v/x.service') == [
        "/tmp/v/x.service:14: Unknown key 'Notify' in section [Service], ignoring."]
    assert ul.parse_systemd_verify(0, '', '', '/tmp/v/x.service') == []
    assert ul.parse_systemd_verify(1, '', 'boom', '/tmp/v/x.service') == [
        'systemd-analyze verify /tmp/v/x.service exited 1: boom']


# --- F14: start timeout, health start period, pull at start ----------------------

F14_BAD = """[Container]
Image=registry.example.com/ml/vllm-openai@sha256:%s
Notify=healthy
HealthCmd=curl -fsS http://127.0.0.1:8000/health
HealthStartPeriod=60m
[Service]
Restart=always
""" % ('b' * 64)


def test_f14_health_start_period_over_default_timeout():
    errors = lint(F14_BAD, model_params_b=None)
    assert 'HealthStartPeriod 3600 s exceeds effective TimeoutStartSec (90s default) (F14)' in errors
    assert any('pulled at start' in e for e in errors)


def test_f14_passes_with_timeout_and_pull_never():
    fixed = F14_BAD.replace('Notify=healthy', 'Notify=healthy\nPull=never') + 'TimeoutStartSec=7200\n'
    assert lint(fixed, model_params_b=None) == []


def test_f14_min_timeout_start():
    errors = lint(F14_BAD.replace('HealthStartPeriod=60m', 'Pull=never') + 'TimeoutStartSec=600\n',
                  model_params_b=None, min_timeout_start_s=3600)
    assert errors == ['TimeoutStartSec 600 s is below the required 3600 s (F14)']


def test_f14_timeout_start_0_is_infinite():
    """systemd.service(5): TimeoutStartSec=0 disables the timeout, like "infinity"."""
    for timeout in ('0', 'infinity'):
        text = F14_BAD.replace('Notify=healthy', 'Notify=healthy\nPull=never') + 'TimeoutStartSec=%s\n' % timeout
        assert lint(text, model_params_b=None, min_timeout_start_s=3600) == [], timeout
        assert lint(_f15('Environment=VLLM_ENGINE_READY_TIMEOUT_S=3600', timeout=timeout),
                    min_timeout_start_s=3600) == [], timeout
    # A short but non-zero timeout is still caught by all three checks.
    text = F14_BAD.replace('Notify=healthy', 'Notify=healthy\nPull=never') + 'TimeoutStartSec=1\n'
    assert lint(text, model_params_b=None, min_timeout_start_s=3600) == [
        'TimeoutStartSec 1 s is below the required 3600 s (F14)',
        'HealthStartPeriod 3600 s exceeds effective TimeoutStartSec (1 s) (F14)']
    assert lint(_f15('Environment=VLLM_ENGINE_READY_TIMEOUT_S=3600', timeout='1')) == [
        'TimeoutStartSec 1 s is below VLLM_ENGINE_READY_TIMEOUT_S=3600: systemd would kill the '
        'start before vLLM gives up (F14/F15)']


# --- F15: VLLM_ENGINE_READY_TIMEOUT_S -----------------------------------------------

def _f15(env_line='', timeout='7200'):
    return """[Container]
Image=%s
Pull=never
%s
Exec=--model org/big-moe-975b
[Service]
TimeoutStartSec=%s
""" % (DIGEST_IMAGE, env_line, timeout)


def test_f15_unset_for_975b():
    errors = lint(_f15())
    assert errors == ["VLLM_ENGINE_READY_TIMEOUT_S unset for a 975B model; vLLM will abort at 600 s "
                      "(TimeoutError: Timed out waiting for engines, F15)"]


def test_f15_set_passes_small_model_passes():
    assert lint(_f15('Environment=VLLM_ENGINE_READY_TIMEOUT_S=3600')) == []
    assert lint(_f15(), model_params_b=8) == []


def test_f15_default_value_and_timeout_below_it():
    assert any('not above' in e for e in lint(_f15('Environment=VLLM_ENGINE_READY_TIMEOUT_S=600')))
    errors = lint(_f15('Environment=VLLM_ENGINE_READY_TIMEOUT_S=3600', timeout='1800'))
    assert errors == ['TimeoutStartSec 1800 s is below VLLM_ENGINE_READY_TIMEOUT_S=3600: systemd would kill the '
                      'start before vLLM gives up (F14/F15)']
    assert lint(_f15('Environment=VLLM_ENGINE_READY_TIMEOUT_S=3600', timeout='infinity')) == []


# --- F12: digest pinning ----------------------------------------------------------

@pytest.mark.parametrize('image', ['vllm/vllm-openai:v0.10.1', 'registry.example.com/vllm/vllm-openai:v0.26.0',
                                   'vllm-openai@sha256:' + 'c' * 64])
def test_f12_unpinned_or_short_image(image):
    text = F13.replace(DIGEST_IMAGE, image)
    assert any('not pinned by digest' in e for e in lint(text, model_params_b=None))


# --- parsers ------------------------------------------------------------------------

@pytest.mark.parametrize('text,expected', [
    ('podman version 5.4.2', (5, 4, 2)), ('podman version 4.3.1', (4, 3, 1)), ('5.0.0-dev', (5, 0, 0)),
    ('4.9', (4, 9, 0)), ('nonsense', None)])
def test_parse_version(text, expected):
    assert ul.parse_version(text) == expected


@pytest.mark.parametrize('text,expected', [
    ('7200', 7200), ('2h', 7200), ('60m', 3600), ('1h 30min', 5400), ('90s', 90), ('infinity', float('inf')),
    ('bogus', None), ('5 fortnights', None)])
def test_parse_timespan(text, expected):
    assert ul.parse_timespan(text) == expected


@pytest.mark.parametrize('text,expected', [('64m', 64 * 1024 ** 2), ('16g', 16 * 1024 ** 3), ('1024', 1024),
                                           ('16gb', 16 * 1024 ** 3), ('lots', None)])
def test_parse_size(text, expected):
    assert ul.parse_size(text) == expected


def test_parse_unit_keeps_repeats_and_continuations():
    s = ul.parse_unit('# c\n[A]\nX=1\nX=2\nY=a \\\n  b\n[B]\n; c\nZ=3\n')
    assert s == {'A': [('X', '1'), ('X', '2'), ('Y', 'a b')], 'B': [('Z', '3')]}
