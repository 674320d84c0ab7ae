# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""hf_peer_serve with stand-ins for systemctl and systemd-run (this machine's tests run without systemd): the
secret is written root-only from the first byte, the unit removes what the module wrote when it stops, and a
daemon that already runs is left alone."""

import os
import stat

from inkling_test_helpers import run_module


def fake_bin(tmp_path, active):
    bindir = tmp_path / 'bin'
    bindir.mkdir(exist_ok=True)
    (bindir / 'systemctl').write_text('#!/bin/sh\necho %s\n' % ('active' if active else 'inactive'))
    (bindir / 'systemd-run').write_text('#!/bin/sh\nprintf "%%s\\n" "$@" > %s\n' % (tmp_path / 'argv'))
    for name in ('systemctl', 'systemd-run'):
        os.chmod(str(bindir / name), 0o755)
    return {'PATH': '%s:%s' % (bindir, os.environ['PATH'])}


def serve(tmp_path, active=False, **extra):
    args = {'unit': 'inkling-hf-rsyncd', 'config': 'port = 8873\n', 'config_path': str(tmp_path / 'rsyncd.conf'),
            'secrets_path': str(tmp_path / 'rsyncd.secrets'), 'user': 'inkling-fleet', 'secret': 'run-secret',
            'rundir': str(tmp_path / 'run')}
    args.update(extra)
    return run_module('hf_peer_serve', args, env=fake_bin(tmp_path, active), tmp_path=tmp_path)


def test_writes_the_secret_root_only_and_starts_the_unit(tmp_path):
    rc, res = serve(tmp_path)
    assert rc == 0 and res['changed'] is True and res['started'] is True, res
    secrets = tmp_path / 'rsyncd.secrets'
    assert secrets.read_text() == 'inkling-fleet:run-secret\n'
    assert stat.S_IMODE(os.stat(str(secrets)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(tmp_path / 'rsyncd.conf')).st_mode) == 0o600
    assert (tmp_path / 'run').is_dir()
    argv = (tmp_path / 'argv').read_text().splitlines()
    assert '--unit=inkling-hf-rsyncd' in argv and '--config=%s' % (tmp_path / 'rsyncd.conf') in argv
    assert '--property=ExecStopPost=+/bin/rm -rf %s %s %s' % (
        tmp_path / 'rsyncd.conf', tmp_path / 'rsyncd.secrets', tmp_path / 'run') in argv
    # sandboxed (issue 36, finding 8): read-only but for the runtime directory, no privilege gained back
    for prop in ('NoNewPrivileges=yes', 'ProtectSystem=strict', 'ReadWritePaths=%s' % (tmp_path / 'run'),
                 'CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_SYS_CHROOT'):
        assert '--property=%s' % prop in argv, argv
    # the secret is in no argument and not in the result
    assert not [a for a in argv if 'run-secret' in a] and 'run-secret' not in str(res)


def test_a_killed_runs_daemon_stops_on_its_own_after_runtime_max_s(tmp_path):
    """RuntimeMaxSec bounds the unit (issue 36, finding 8); 0 leaves it unbounded."""
    rc, res = serve(tmp_path, runtime_max_s=176400)
    assert rc == 0, res
    argv = (tmp_path / 'argv').read_text().splitlines()
    assert '--property=RuntimeMaxSec=176400' in argv
    assert argv.index('--property=RuntimeMaxSec=176400') < argv.index('/usr/bin/rsync')
    rc, res = serve(tmp_path)
    assert rc == 0 and not [a for a in (tmp_path / 'argv').read_text().splitlines() if 'RuntimeMaxSec' in a]


def test_a_running_daemon_is_left_alone(tmp_path):
    rc, res = serve(tmp_path, active=True)
    assert rc == 0 and res['changed'] is False and res['started'] is False
    assert not (tmp_path / 'rsyncd.secrets').exists() and not (tmp_path / 'argv').exists()


def test_an_empty_address_fails_before_anything_changes(tmp_path):
    args = {'unit': 'inkling-hf-rsyncd', 'config': 'port = 8873\n', 'config_path': str(tmp_path / 'rsyncd.conf'),
            'secrets_path': str(tmp_path / 'rsyncd.secrets'), 'user': 'inkling-fleet', 'secret': 'run-secret',
            'rundir': str(tmp_path / 'run'), 'address': ''}
    rc, res = run_module('hf_peer_serve', args, env=fake_bin(tmp_path, False), tmp_path=tmp_path)
    assert rc != 0 and res['failed'] is True
    assert 'hf_cache_peer_address is empty' in res['msg'] and 'Remedy: set hf_cache_peer_address' in res['msg']
    assert not (tmp_path / 'rsyncd.secrets').exists() and not (tmp_path / 'argv').exists()


def test_what_a_killed_run_left_is_ended_in_the_same_task(tmp_path):
    """With pid_file: the killed run's copy job is ended and its files removed, then this run's daemon starts."""
    import json
    import subprocess
    import sys
    import time
    script = tmp_path / 'AnsiballZ_hf_peer_copy.py'
    script.write_text('import time\ntime.sleep(120)\n')
    proc = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    time.sleep(0.3)
    pid_file = tmp_path / 'copy.pid'
    pid_file.write_text(json.dumps({'pid': proc.pid, 'pgid': os.getpgid(proc.pid)}))
    (tmp_path / 'left').write_text('old secret')
    args = {'unit': 'inkling-hf-rsyncd', 'config': 'port = 8873\n', 'config_path': str(tmp_path / 'rsyncd.conf'),
            'secrets_path': str(tmp_path / 'rsyncd.secrets'), 'user': 'inkling-fleet', 'secret': 'run-secret',
            'rundir': str(tmp_path / 'run'), 'address': '10.0.0.1', 'pid_file': str(pid_file),
            'remove': [str(tmp_path / 'left')]}
    try:
        rc, res = run_module('hf_peer_serve', args, env=fake_bin(tmp_path, False), tmp_path=tmp_path)
        assert rc == 0 and res['started'] is True, res
        assert res['reset']['killed'] == [proc.pid] and proc.wait(10) is not None
        assert not pid_file.exists() and not (tmp_path / 'left').exists()
        assert 'ended what a killed run of the peer fan-out left' in res['msg']
        assert (tmp_path / 'rsyncd.secrets').read_text() == 'inkling-fleet:run-secret\n'
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_with_a_relay_port_the_unit_runs_the_relay_beside_the_daemon(tmp_path):
    """The relay's script (module_utils/hf_peer_relay.py, as shipped) and its configuration go to the run
    directory, root-only; the unit's command is the relay with the rsync daemon as its command, so the unit holds
    both or neither; the secret is read from the secrets file, never written into an argument or the config."""
    import json
    import py_compile
    rundir = tmp_path / 'run'
    args = {'unit': 'inkling-hf-rsyncd', 'config': 'port = 8873\n', 'config_path': str(tmp_path / 'rsyncd.conf'),
            'secrets_path': str(tmp_path / 'rsyncd.secrets'), 'user': 'inkling-fleet', 'secret': 'run-secret',
            'rundir': str(rundir), 'address': '10.0.0.1', 'relay_port': 8874, 'relay_repo_dir': '/srv/hub/models--o--n',
            'relay_allow': ['10.0.0.2', '10.0.0.1', '10.0.0.2'], 'relay_stall_s': 15}
    rc, res = run_module('hf_peer_serve', args, env=fake_bin(tmp_path, False), tmp_path=tmp_path)
    assert rc == 0 and res['started'] is True, res
    argv = (tmp_path / 'argv').read_text().splitlines()
    cmd = argv[argv.index(str(rundir / 'relay.py')) - 1:]
    assert cmd[1:4] == [str(rundir / 'relay.py'), str(rundir / 'relay.json'), '--']
    assert cmd[4:6] == ['/usr/bin/rsync', '--daemon']
    for name in ('relay.py', 'relay.json'):
        assert stat.S_IMODE(os.stat(str(rundir / name)).st_mode) == 0o600
    py_compile.compile(str(rundir / 'relay.py'), doraise=True)
    assert 'INKLING-RELAY 1' in (rundir / 'relay.py').read_text()
    cfg = json.loads((rundir / 'relay.json').read_text())
    assert cfg['allow'] == ['10.0.0.1', '10.0.0.2'] and cfg['port'] == 8874 and cfg['address'] == '10.0.0.1'
    assert cfg['blobs_dir'] == '/srv/hub/models--o--n/blobs' and cfg['inbox'] == '/srv/hub/models--o--n/.inkling/incoming'
    assert cfg['secrets_file'] == str(tmp_path / 'rsyncd.secrets') and cfg['stall_s'] == 15
    assert 'run-secret' not in (rundir / 'relay.json').read_text() and not [a for a in argv if 'run-secret' in a]


def owner_bins(tmp_path):
    """Stand-ins for groupadd and useradd that record their arguments."""
    env = fake_bin(tmp_path, False)
    bindir = tmp_path / 'bin'
    for name in ('groupadd', 'useradd'):
        (bindir / name).write_text('#!/bin/sh\nprintf "%%s\\n" "%s $*" >> %s\n' % (name, tmp_path / 'accounts'))
        os.chmod(str(bindir / name), 0o755)
    return env


def test_the_serving_user_and_its_group_are_created_in_the_same_run_when_missing(tmp_path):
    """Issue 36, finding 8: the daemons serve as a dedicated unprivileged user, created by the module that starts
    them (no extra task: the fleet's peer staging waits for every task on every host)."""
    args = {'unit': 'inkling-hf-rsyncd', 'config': 'port = 8873\n', 'config_path': str(tmp_path / 'rsyncd.conf'),
            'secrets_path': str(tmp_path / 'rsyncd.secrets'), 'user': 'inkling-fleet', 'secret': 'run-secret',
            'rundir': str(tmp_path / 'run'), 'relay_owner': 'inkling-test-absent', 'relay_group': 'inkling-test-absent',
            'create_owner': True}
    rc, res = run_module('hf_peer_serve', args, env=owner_bins(tmp_path), tmp_path=tmp_path)
    assert rc == 0 and res['created'] == ['group inkling-test-absent', 'user inkling-test-absent'], res
    assert (tmp_path / 'accounts').read_text().splitlines() == [
        'groupadd --system inkling-test-absent',
        'useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --gid '
        'inkling-test-absent --comment inkling.fleet hub cache peer serving inkling-test-absent']
    # an existing user is left alone; root is refused before anything changes
    (tmp_path / 'accounts').unlink()
    rc, res = run_module('hf_peer_serve', dict(args, relay_owner='nobody', relay_group='nogroup'),
                         env=owner_bins(tmp_path), tmp_path=tmp_path)
    assert rc == 0 and res['created'] == [] and not (tmp_path / 'accounts').exists(), res
    rc, res = run_module('hf_peer_serve', dict(args, relay_owner='root', secrets_path=str(tmp_path / 'other')),
                         env=owner_bins(tmp_path), tmp_path=tmp_path)
    assert rc != 0 and 'must not serve as' in res['msg'] and not (tmp_path / 'other').exists(), res
