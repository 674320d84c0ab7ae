# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Tests for the quadlet_unit module: runs it as Ansible does, with a fake podman and quadlet."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import stat
import textwrap

import pytest

from inkling_test_helpers import run_module

IMAGE = 'registry.example.com/vllm/vllm-openai@sha256:' + 'a' * 64

FAKE_QUADLET = textwrap.dedent('''\
    #!/bin/sh
    # Fake quadlet -dryrun: podman 5 messages; any Bogus= key is "unsupported".
    for f in "$QUADLET_UNIT_DIRS"/*.container; do
      n=$(basename "$f" .container)
      echo "quadlet-generator[1]: Loading source unit file $f" >&2
      if grep -q '^Bogus=' "$f"; then
        echo "quadlet-generator[1]: converting \\"$n.container\\": unsupported key 'Bogus' in group 'Container' in $f" >&2
        exit 1
      fi
      printf -- '---%s.service---\\n[Unit]\\nDescription=x\\n\\n[Service]\\nExecStart=/bin/true\\nTimeoutStartSec=4200\\n' "$n"
    done
    ''')


def _exe(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def env(tmp_path):
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    return dict(
        tmp=tmp_path,
        podman=_exe(bindir / 'podman', '#!/bin/sh\necho "podman version ${FAKE_PODMAN_VERSION:-5.4.2}"\n'),
        quadlet=_exe(bindir / 'quadlet', FAKE_QUADLET),
        qdir=str(tmp_path / 'quadlet'),
        sdir=str(tmp_path / 'systemd'),
        backup=str(tmp_path / 'state' / 'inkling-vllm.unit.previous'),
    )


def args(ctx, **over):
    a = dict(
        name='inkling-vllm', image=IMAGE,
        args=['--tensor-parallel-size', '8', '--model', 'thinkingmachines/Inkling-NVFP4', '--port', '8000'],
        env={'HF_HUB_CACHE': '/hub', 'HF_HUB_OFFLINE': '1', 'VLLM_ENGINE_READY_TIMEOUT_S': '3600'},
        volumes=[{'source': '/var/lib/hub', 'target': '/hub', 'options': 'ro'}],
        devices=['nvidia.com/gpu=all'], podman_args=['--ipc=host'], label_disable=True,
        timeout_start_s=4200, timeout_stop_s=150, stop_timeout_s=135, model_params_b=975.0,
        min_timeout_start_s=3600, hub_cache_target='/hub',
        quadlet_dir=ctx['qdir'], systemd_dir=ctx['sdir'], backup_path=ctx['backup'],
        podman_path=ctx['podman'], quadlet_path=ctx['quadlet'], unit_type='auto',
    )
    a.update(over)
    return a


def run(ctx, check_mode=False, podman_version='5.4.2', **over):
    return run_module('quadlet_unit', args(ctx, **over), tmp_path=ctx['tmp'], check_mode=check_mode,
                      env={'FAKE_PODMAN_VERSION': podman_version, 'PATH': os.environ['PATH']})


def test_install_then_idempotent(env):
    rc, res = run(env)
    assert rc == 0, res
    assert res['changed'] and res['unit_type'] == 'quadlet' and res['backup'] is None
    path = os.path.join(env['qdir'], 'inkling-vllm.container')
    assert res['path'] == path
    with open(path) as fh:
        assert fh.read() == res['content']
    assert 'Pull=never' in res['content']
    assert res['generated'].startswith('[Unit]')
    assert oct(os.stat(path).st_mode & 0o777) == '0o644'
    rc, res = run(env)
    assert rc == 0 and not res['changed']


def test_change_keeps_backup_and_diff(env):
    run(env)
    with open(os.path.join(env['qdir'], 'inkling-vllm.container')) as fh:
        first = fh.read()
    rc, res = run(env, env={'HF_HUB_CACHE': '/hub', 'HF_HUB_OFFLINE': '1', 'VLLM_ENGINE_READY_TIMEOUT_S': '7200'},
                  timeout_start_s=7800, _ansible_diff=True)
    assert rc == 0 and res['changed']
    assert res['backup'] == env['backup']
    with open(env['backup']) as fh:
        assert fh.read() == first
    assert res['diff']['before'] == first
    assert 'VLLM_ENGINE_READY_TIMEOUT_S=7200' in res['diff']['after']


def test_check_mode_changes_nothing_but_still_checks(env):
    rc, res = run(env, check_mode=True)
    assert rc == 0 and res['changed']
    assert not os.path.exists(env['qdir'])
    rc, res = run(env, check_mode=True, quadlet_options=['Bogus=1'])
    assert rc == 1 and not res['changed']
    assert res['msg'].startswith(
        'unit quadlet for inkling-vllm not installed (the running unit is untouched): quadlet on podman 5.4.2 '
        'rejected inkling-vllm.container: converting "inkling-vllm.container": unsupported key \'Bogus\' in group '
        '\'Container\' in ')
    assert not os.path.exists(env['qdir'])


def test_bad_key_refused_before_the_installed_unit_is_touched(env):
    run(env)
    path = os.path.join(env['qdir'], 'inkling-vllm.container')
    with open(path) as fh:
        before = fh.read()
    rc, res = run(env, quadlet_options=['Bogus=1'])
    assert rc == 1
    assert "unsupported key 'Bogus'" in res['msg'] and 'running unit is untouched' in res['msg']
    with open(path) as fh:
        assert fh.read() == before
    assert not os.path.exists(env['backup'])


def test_lint_failure_names_the_field_failure(env):
    rc, res = run(env, podman_args=[], env={'HF_HUB_CACHE': '/hub'})
    assert rc == 1 and not res['changed']
    assert res['errors'] == [
        'tensor_parallel_size=8 but container /dev/shm left at default (64m); add --ipc=host '
        '(PodmanArgs=--ipc=host) or shm size >= 16g (NCCL shared-memory segments, F8)',
        'read-only hub cache /hub requires HF_HUB_OFFLINE=1 (else huggingface_hub writes into it: '
        '[Errno 30] Read-only file system, F9)',
        'VLLM_ENGINE_READY_TIMEOUT_S unset for a 975B model; vLLM will abort at 600 s '
        '(TimeoutError: Timed out waiting for engines, F15)']
    assert res['msg'] == ('unit quadlet for inkling-vllm not installed (the running unit is untouched): '
                          + '; '.join(res['errors']))
    assert not os.path.exists(env['qdir'])


def test_stop_timeouts_must_nest(env):
    rc, res = run(env, timeout_stop_s=100, stop_timeout_s=120)
    assert rc == 1 and 'timeout_stop_s (100) must exceed stop_timeout_s (120)' in res['msg']


def test_old_podman_falls_back_to_plain_unit_and_replaces_quadlet(env, tmp_path):
    run(env)
    rc, res = run(env, podman_version='4.3.1')
    assert rc == 0, res
    assert res['unit_type'] == 'systemd' and res['changed']
    assert res['path'] == os.path.join(env['sdir'], 'inkling-vllm.service')
    assert 'ExecStart=' + env['podman'] + ' run --name inkling-vllm' in res['content']
    assert not os.path.exists(os.path.join(env['qdir'], 'inkling-vllm.container'))
    with open(env['backup']) as fh:
        assert '[Container]' in fh.read()


def test_quadlet_requested_without_quadlet(env):
    rc, res = run(env, podman_version='4.3.1', unit_type='quadlet')
    assert rc == 1 and 'no quadlet generator' in res['msg']


def test_podman_missing(env):
    rc, res = run(env, podman_path=str(env['tmp'] / 'nope'))
    assert rc == 1


# --- daemon_reload and check_loaded: the reload and `systemctl cat` the role ran as tasks before ------------

FAKE_SYSTEMCTL = textwrap.dedent('''\
    #!/bin/sh
    # Fake systemctl: logs its calls; `cat` finds a unit whose file is in $FAKE_UNIT_DIR (quadlet: its .container).
    echo "$@" >> "$FAKE_SYSTEMCTL_LOG"
    case "$1" in
      daemon-reload) exit "${FAKE_RELOAD_RC:-0}" ;;
      cat)
        n=$(basename "$2" .service)
        if [ -z "$FAKE_CAT_MISSING" ] && ls "$FAKE_UNIT_DIR/$n".* >/dev/null 2>&1; then echo "# $2"; exit 0; fi
        echo "No files found for $2." >&2; exit 1 ;;
    esac
    exit 1
    ''')


def run_systemd(ctx, check_mode=False, **over):
    """run() with a fake systemctl first on PATH: (rc, result, the systemctl calls)."""
    bindir = ctx['tmp'] / 'sbin'
    bindir.mkdir(exist_ok=True)
    _exe(bindir / 'systemctl', FAKE_SYSTEMCTL)
    log = ctx['tmp'] / 'systemctl.log'
    if log.exists():
        log.unlink()
    env = {'FAKE_PODMAN_VERSION': '5.4.2', 'PATH': str(bindir) + os.pathsep + os.environ['PATH'],
           'FAKE_SYSTEMCTL_LOG': str(log), 'FAKE_UNIT_DIR': ctx['qdir']}
    env.update(over.pop('env_extra', {}))
    rc, res = run_module('quadlet_unit', args(ctx, **dict({'daemon_reload': True, 'check_loaded': True}, **over)),
                         tmp_path=ctx['tmp'], check_mode=check_mode, env=env)
    return rc, res, log.read_text().splitlines() if log.exists() else []


def test_reload_after_a_change_then_systemd_knows_the_unit(env):
    rc, res, calls = run_systemd(env)
    assert rc == 0, res
    assert res['changed'] and res['reloaded'] and calls == ['daemon-reload', 'cat inkling-vllm.service']
    # unchanged: no reload, the check all the same
    rc, res, calls = run_systemd(env)
    assert rc == 0 and not res['changed'] and not res['reloaded'] and calls == ['cat inkling-vllm.service']


def test_check_mode_never_reloads(env):
    # a unit that would change is not installed: systemd cannot know it, nothing is asked
    rc, res, calls = run_systemd(env, check_mode=True)
    assert rc == 0 and res['changed'] and not res['reloaded'] and calls == []
    run_systemd(env)
    # unchanged in check mode: systemd must know it
    rc, res, calls = run_systemd(env, check_mode=True)
    assert rc == 0 and not res['changed'] and calls == ['cat inkling-vllm.service']


def test_a_unit_systemd_does_not_know_fails_naming_the_generator(env):
    rc, res, calls = run_systemd(env, env_extra={'FAKE_CAT_MISSING': '1'})
    path = os.path.join(env['qdir'], 'inkling-vllm.container')
    assert rc == 1 and res['changed'] and calls == ['daemon-reload', 'cat inkling-vllm.service']
    assert res['msg'] == ('%s installed but systemd has no inkling-vllm.service after daemon-reload (No files found '
                          'for inkling-vllm.service.). Check the quadlet generator (journalctl -b | grep quadlet) for '
                          'podman 5.4.2 (F13).' % path)
    assert os.path.exists(path)


def test_a_failed_reload_fails(env):
    rc, res, calls = run_systemd(env, env_extra={'FAKE_RELOAD_RC': '1'})
    assert rc == 1 and calls == ['daemon-reload'] and 'systemctl daemon-reload failed (rc=1)' in res['msg']


def test_without_the_options_systemd_is_not_asked(env):
    rc, res, calls = run_systemd(env, daemon_reload=False, check_loaded=False)
    assert rc == 0 and res['changed'] and not res['reloaded'] and calls == []
