# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""preflight_recheck (and preflight_host_facts' new probes) run as Ansible runs them, against the lab's
nvidia-smi stand-in and small fake tools on PATH (journalctl, dmesg, systemctl, lspci, nv-fabricmanager)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys

import pytest

from inkling_test_helpers import PROFILES, STANDIN, run_module

HERE = os.path.dirname(os.path.abspath(__file__))
LOGS = os.path.join(HERE, '..', '..', 'fixtures', 'kernel-log')
DRIVER = '580.159.04'


def write_tool(directory, name, body):
    path = os.path.join(str(directory), name)
    with open(path, 'w') as handle:
        handle.write('#!%s\nimport sys, os\n%s\n' % (sys.executable, body))
    os.chmod(path, 0o755)
    return path


@pytest.fixture
def host(tmp_path):
    """A fake H200 HGX host: the nvidia-smi stand-in (profile h200-8) and fake system tools."""
    bin_dir = tmp_path / 'bin'
    conf = tmp_path / 'lab'
    (conf / 'faults').mkdir(parents=True)
    bin_dir.mkdir()
    (conf / 'profile').write_text('h200-8\n')
    state = tmp_path / 'state'
    state.mkdir()
    (state / 'fm-state').write_text('active')
    (state / 'kernel-log').write_text('[    1.000000] Linux version 6.18\n')
    write_tool(bin_dir, 'journalctl', 'sys.stdout.write(open(%r).read())' % str(state / 'kernel-log'))
    write_tool(bin_dir, 'dmesg', 'sys.exit(1)')
    write_tool(bin_dir, 'systemctl', 'print("LoadState=loaded"); print("ActiveState=" + open(%r).read().strip())'
               % str(state / 'fm-state'))
    write_tool(bin_dir, 'nv-fabricmanager', 'print("Fabric Manager version is : %s")' % DRIVER)
    write_tool(bin_dir, 'lspci', 'print("\\n".join("%02x:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch]" % n '
                                 'for n in range(5, 9)))')
    os.symlink(STANDIN, str(bin_dir / 'nvidia-smi'))
    version_file = tmp_path / 'version'
    version_file.write_text('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n' % DRIVER)
    modules = tmp_path / 'modules'
    modules.write_text('nvidia 1 0 - Live 0x0\n')

    class Host(object):
        env = {'PATH': '%s:/usr/bin:/bin' % bin_dir, 'INKLING_LAB_CONF_DIR': str(conf),
               'INKLING_LAB_PROFILES_DIR': PROFILES}
        args = {'host': 'lab-h200-01', 'driver_version_file': str(version_file),
                'kernel_modules_file': str(modules)}

        def fault(self, name, params=None):
            (conf / 'faults' / name).write_text(json.dumps(params) if params else '')

        def fm(self, state_name):
            (state / 'fm-state').write_text(state_name)

        def kernel_log(self, text):
            (state / 'kernel-log').write_text(text)

        def recheck(self, **extra):
            args = dict(self.args)
            args.update(extra)
            return run_module('preflight_recheck', args, env=self.env, tmp_path=tmp_path)

    return Host()


def test_healthy_host(host):
    rc, result = host.recheck()
    assert rc == 0 and not result.get('failed'), result
    assert result['report']['ok'] and result['summary'] == ''
    assert result['changed'] is False
    checks = {c['check']: c for c in result['report']['checks']}
    assert checks['gpu.xid']['message'] == ('no Xid event since boot that means a bad GPU '
                                            '(kernel log: journalctl -k -b)')
    assert checks['gpu.recovery_action']['message'] == 'GPU recovery action None on 8 GPUs'


def test_fabric_manager_stopped_after_preflight(host):
    host.fm('inactive')
    rc, result = host.recheck()
    assert rc == 0
    assert [c['check'] for c in result['report']['failures']] == ['fabric.manager']
    assert result['summary'].startswith('lab-h200-01: re-check before the drain failed (1 problem); '
                                        'the host is not drained or stopped:\n- [fabric.manager] '
                                        'nvidia-fabricmanager is inactive on an NVSwitch system (4 NVSwitch devices)')


def test_fail_option_fails_the_task_with_the_summary(host):
    host.fault('ecc-errors')
    rc, result = host.recheck(fail=True)
    assert rc != 0 and result['failed']
    assert result['msg'] == result['summary']
    assert '[gpu.ecc] uncorrected ECC errors on GPU 3 (2)' in result['msg']


def test_a_new_xid_and_a_recovery_action_name_gpu_and_bus_id(host):
    host.fault('recovery-action', {'action': 'Reboot', 'gpus': [2]})
    # GPU 2 of the h200-8 profile: bus id 00000000:1A:00.0 (lab/nvidia-smi/profiles/h200-8.json)
    with open(os.path.join(PROFILES, 'h200-8.json')) as handle:
        bus = json.load(handle)['gpus'][2]['pci.bus_id']
    pci = '0000:%s:00' % bus.split(':')[1].lower()
    with open(os.path.join(LOGS, 'xid48-gpu-operator-1146.txt')) as handle:
        host.kernel_log(handle.read().replace('0000:07:00', pci))
    rc, result = host.recheck()
    failures = {c['check']: c for c in result['report']['failures']}
    assert sorted(failures) == ['gpu.recovery_action', 'gpu.xid']
    assert failures['gpu.recovery_action']['message'].startswith(
        'the driver asks for a recovery action: GPU 2 (PCI %s): Reboot' % bus)
    assert failures['gpu.xid']['message'].startswith('Xid 48 on GPU 2 (PCI %s) 240315 s after boot' % bus)


def test_nvml_mismatch(host):
    host.fault('nvml-mismatch')
    rc, result = host.recheck()
    assert [c['check'] for c in result['report']['failures']] == ['driver.nvml']
    assert result['report']['gpu'] is None


def test_host_facts_report_the_kernel_log_and_nvlink5_probes(host, tmp_path):
    with open(os.path.join(LOGS, 'xid79-open-gpu-kernel-modules-1151.txt')) as handle:
        host.kernel_log(handle.read())
    rc, result = run_module('preflight_host_facts', {'hub_cache_dir': str(tmp_path / 'hub'),
                                                     'kernel_modules_file': host.args['kernel_modules_file'],
                                                     'driver_version_file': host.args['driver_version_file']},
                            env=host.env, tmp_path=tmp_path)
    assert rc == 0, result
    facts = result['host_facts']
    assert facts['kernel_log']['source'] == 'journalctl -k -b'
    assert [(e['code'], e['pci']) for e in facts['kernel_log']['events']] == [(79, '0000:2b:00')]
    assert facts['nvlink5']['kernel_modules'] == ['nvidia']
    assert facts['nvlink5']['nvlsm']['installed'] is False
    assert facts['nvswitch_count'] == 4
    assert facts['fabricmanager']['active'] is True
