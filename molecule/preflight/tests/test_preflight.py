# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Verify the preflight reports that converge.yml and side_effect.yml left on the controller.

Each field failure of docs/field-failures.md injected on mol-pf-faulty must give its message;
the healthy hosts must pass; every report must be valid JSON with ok/failures/warnings/facts/variant.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os
import re

import pytest

testinfra_hosts = ['mol-pf-faulty']

REPORTS = os.path.join(os.environ['MOLECULE_EPHEMERAL_DIRECTORY'], 'reports')


def report(case, host='mol-pf-faulty'):
    with open(os.path.join(REPORTS, case, host + '.json')) as handle:
        return json.load(handle)


def after(case):
    with open(os.path.join(REPORTS, case, 'after.json')) as handle:
        return json.load(handle)


def failures(rep):
    return {f['check']: f['message'] for f in rep['failures']}


def warnings(rep):
    return {f['check']: f['message'] for f in rep['warnings']}


def test_every_report_is_valid_json_with_the_contract_keys():
    paths = glob.glob(os.path.join(REPORTS, '*', 'mol-pf-*.json'))
    assert len(paths) >= 19
    for path in paths:
        with open(path) as handle:
            rep = json.load(handle)
        assert set(('host', 'ok', 'failures', 'warnings', 'checks', 'facts', 'variant')) <= set(rep), path
        assert rep['ok'] == (rep['failures'] == []), path
        for fail in rep['failures']:
            assert fail['found'] is not None and fail['expected'] and fail['remedy'], (path, fail)


@pytest.mark.parametrize('host,variant', [('mol-pf-ok-h200', 'sm90-patched'), ('mol-pf-ok-b200', 'sm100')])
def test_healthy_hosts_pass(host, variant):
    rep = report('converge', host)
    assert rep['ok'], rep['failures']
    assert rep['variant']['name'] == variant
    assert rep['facts']['gpu']['gpu_count'] == 8
    assert rep['facts']['host']['nvswitch_count'] in (2, 4)
    checks = {c['check']: c for c in rep['checks']}
    assert checks['fabric.manager']['ok'] and checks['fabric.manager_version']['ok']
    assert checks['cdi.devices']['found'] == '17 devices'


def test_faulty_host_failed_converge_with_every_problem():
    msgs = failures(report('converge'))
    assert msgs['gpu.count'] == 'expected 8 GPUs for tensor_parallel_size=8, found 7'
    assert msgs['gpu.mig'].startswith('MIG enabled on GPU 0 (current=Enabled, pending=Enabled)')


def test_faulty_host_passes_without_faults():
    rep = report('healthy')
    assert rep['ok'], rep['failures']


def test_f1_fabric_manager_inactive():
    msgs = failures(report('f1-fm-inactive'))
    assert msgs['fabric.manager'] == ('nvidia-fabricmanager is inactive on an NVSwitch system (4 NVSwitch devices); '
                                      'install/start FM matching driver 580.159.04')
    assert msgs['fabric.state'].startswith('fabric registration not complete on 8/8 GPUs after 0s (State=In Progress)')


def test_f1_fix_in_check_mode_changes_nothing():
    rep = report('f1-fix-check-mode')
    assert 'fabric.manager' in failures(rep)
    assert after('f1-fix-check-mode')['fabricmanager'] == 'inactive'


def test_f1_fix_starts_fabric_manager_then_waits_for_the_fabric():
    rep = report('f1-fix')
    msgs = failures(rep)
    assert rep['fixed'] == ['fabricmanager']
    assert 'fabric.manager' not in msgs
    assert after('f1-fix')['fabricmanager'] == 'active'
    # the stand-in's fabric stays In Progress: bounded wait, then failure
    assert re.match(r'fabric registration not complete on 8/8 GPUs after [1-9]\d*s \(State=In Progress\)',
                    msgs['fabric.state'])


def test_f2_vm_with_7_gpus_and_fabric_in_progress():
    rep = report('f2-vm-7-gpus-fabric-in-progress')
    msgs = failures(rep)
    assert msgs['gpu.count'] == 'expected 8 GPUs for tensor_parallel_size=8, found 7'
    assert re.match(r'fabric registration not complete on 7/7 GPUs after [1-9]\d*s \(State=In Progress\)',
                    msgs['fabric.state'])
    assert 'fabric.manager' not in msgs  # no NVSwitch in a VM guest: FM is the hypervisor's
    assert rep['fabric_waited_s'] > 0


def test_f3_fabric_manager_version_mismatch():
    msgs = failures(report('f3-fm-version'))
    assert msgs['fabric.manager_version'] == 'fabric manager 575.57.08 does not match driver 580.159.04'


def test_f4_nvml_mismatch():
    rep = report('f4-nvml-mismatch')
    msgs = failures(rep)
    assert msgs['driver.nvml'] == ('NVML driver/library version mismatch: loaded kernel module 580.126.09 != '
                                   'user-space 580.159.04; reboot required; pin driver packages')
    assert rep['variant'] is None
    assert 'variant' in msgs
    # the other checks still ran
    assert 'cdi.location' in {c['check'] for c in rep['checks']}


def test_f5_mig():
    assert failures(report('f5-mig'))['gpu.mig'] == (
        'MIG enabled on GPU 0 (current=Enabled, pending=Enabled); vLLM TP=8 needs whole GPUs; '
        'disable MIG (`nvidia-smi -mig 0`) and reset')


def test_f6_podman_551_spec_in_var_run_cdi():
    rep = report('f6-podman-551-var-run-cdi')
    msg = failures(rep)['cdi.location']
    assert msg.startswith('nvidia-ctk sees the spec in /var/run/cdi but podman 5.5.1 only reads /etc/cdi')
    assert msg.endswith('write the spec to /etc/cdi or set cdi_spec_dirs')


def test_f6_podman_551_spec_in_etc_cdi_passes_with_a_warning():
    rep = report('f6-podman-551-etc-cdi')
    assert rep['ok'], rep['failures']
    assert 'podman.known_bad' in warnings(rep)


def test_f7_stale_cdi_spec():
    assert failures(report('f7-stale-cdi'))['cdi.stale'] == (
        'CDI spec /etc/cdi/nvidia.yaml built for 570.133.20, driver is 580.159.04 (2 missing hostPaths)')


def test_f8_ipc_host_off_warns():
    rep = report('f8-ipc-host-off')
    assert rep['ok']
    assert warnings(rep)['host.shm'].startswith('tensor_parallel_size=8 but container /dev/shm left at default; '
                                                'add --ipc=host or shm size >= 1024 MiB')


def test_f8_small_host_shm_with_ipc_host_fails():
    assert failures(report('f8-ipc-host-small-shm'))['host.shm'] == (
        'tensor_parallel_size=8 with --ipc=host but host /dev/shm is 64 MiB; NCCL needs >= 1024 MiB')


def test_f13_podman_too_old_for_quadlet():
    assert failures(report('f13-podman-431'))['podman.version'].startswith('podman 4.3.1 has no quadlet support')


def test_gpu_health_problems_reported_together():
    msgs = failures(report('gpu-health'))
    assert msgs['gpu.ecc'] == 'uncorrected ECC errors on GPU 3 (2)'
    assert msgs['gpu.row_remapping'] == 'row remapping pending on GPU 2'
    assert msgs['gpu.persistence'] == 'persistence mode off on GPU 0, 1, 2, 3, 4, 5, 6, 7'


def test_bare_host_without_podman_or_cdi():
    msgs = failures(report('bare-host'))
    assert set(msgs) == {'podman.version', 'cdi.spec'}
    assert msgs['cdi.spec'].startswith('no CDI spec for nvidia.com/gpu in /etc/cdi or /var/run/cdi')


def test_faults_were_reverted(host):
    assert host.service('nvidia-fabricmanager').is_running
    assert host.file('/etc/cdi/nvidia.yaml').exists
    assert not host.file('/var/run/cdi/nvidia.yaml').exists
    assert host.run('ls /etc/inkling-lab/faults').stdout.strip() == ''
