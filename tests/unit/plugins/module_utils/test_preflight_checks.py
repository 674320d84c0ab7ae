# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Preflight checks: every field failure (F1-F8, F13 of docs/field-failures.md) as input -> message.

GPU facts follow the ``nvidia_gpu`` schema of docs/architecture.md. The healthy 2x H200 host is the
real capture in ``tests/unit/fixtures/nvidia-smi/h200-2gpu-driver580`` (driver 580.159.04, fabric
Completed/Success, no NVSwitch in the guest, no podman, no CDI spec).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc
from ansible_collections.inkling.fleet.plugins.module_utils import variant as vt
from inkling_test_helpers import default_table

DRIVER = '580.159.04'
GIB = 1024 ** 3
BAD_PODMAN = [{'version': '5.5.1', 'reason': 'default cdi_spec_dirs lists only /etc/cdi (podman#26569)',
               'cdi_spec_dirs': ['/etc/cdi']}]


def make_gpu(count=8, name='NVIDIA H200', driver=DRIVER, fabric=('Completed', 'Success'), **over):
    gpus = []
    for i in range(count):
        g = {
            'index': i, 'uuid': 'GPU-00000000-0000-0000-0000-00000000000%d' % i, 'name': name,
            'pci_bus_id': '00000000:%02X:00.0' % (0x18 + i), 'compute_cap': '9.0',
            'compute_cap_major': 9, 'compute_cap_minor': 0, 'memory_total_mib': 143771,
            'persistence_mode': True, 'mig_mode_current': False, 'mig_mode_pending': False,
            'ecc_mode_current': True, 'ecc_errors_uncorrected_volatile': 0,
            'remapped_rows_pending': False, 'remapped_rows_failure': False,
            'fabric_state': fabric[0], 'fabric_status': fabric[1],
        }
        g.update(over)
        gpus.append(g)
    return {'driver_version': driver, 'cuda_version': '13.0', 'gpu_count': count, 'architecture': 'hopper',
            'compute_caps': ['9.0'], 'memory_total_mib': 143771 * count, 'gpus': gpus}


def cdi_spec(path='/etc/cdi/nvidia.yaml', gpu=None, driver=DRIVER, missing=None):
    gpu = gpu or make_gpu()
    devices = [str(g['index']) for g in gpu['gpus']] + [g['uuid'] for g in gpu['gpus']] + ['all']
    return {'path': path, 'kind': 'nvidia.com/gpu', 'devices': devices, 'error': None,
            'host_paths': ['/dev/nvidia0', '/usr/lib/x86_64-linux-gnu/libcuda.so.%s' % driver],
            'missing_host_paths': missing or []}


def host_facts(**over):
    facts = {
        'kernel_module_version': DRIVER,
        'userspace_driver_versions': [DRIVER],
        'apt_nvidia_event': None,
        'fabricmanager': {'installed': True, 'active': True, 'state': 'active', 'version': DRIVER},
        'nvswitch_count': 4,
        'cdi_specs': [cdi_spec()],
        'containers_conf_cdi_spec_dirs': None,
        'podman': {'found': True, 'version': '5.4.2', 'graph_root': '/var/lib/containers/storage',
                   'tmp_dir': '/var/tmp'},
        'disk': {'hub_cache': {'path': '/var/lib/inkling/huggingface/hub', 'existing': '/var/lib',
                               'device': 1, 'free_bytes': 3000 * GIB},
                 'graphroot': {'path': '/var/lib/containers/storage', 'existing': '/var/lib', 'device': 1,
                               'free_bytes': 3000 * GIB},
                 'tmpdir': {'path': '/var/tmp', 'existing': '/var/tmp', 'device': 1, 'free_bytes': 3000 * GIB}},
        'hub_cache_model_bytes': 0,
        'shm_bytes': 1024 * GIB,
        'selinux': 'disabled',
    }
    facts.update(over)
    return facts


VARIANT = {'name': 'sm90-patched', 'min_driver': '580.65.06',
           'model': {'repo_id': 'thinkingmachines/Inkling-NVFP4', 'size_bytes': 591854374368}}


def run(gpu=None, gpu_error=None, facts=None, variant='default', **kw):
    if variant == 'default':
        variant = VARIANT
    kw.setdefault('podman_bad_versions', BAD_PODMAN)
    kw.setdefault('image_free_bytes', 50 * GIB)
    kw.setdefault('tmp_free_bytes', 20 * GIB)
    kw.setdefault('variant_error', None if variant else 'no variant for 7 x NVIDIA H200')
    return pc.evaluate('gpu-node-01', gpu=gpu if gpu is not None or gpu_error else make_gpu(),
                       gpu_error=gpu_error, host_facts=facts or host_facts(), variant=variant, **kw)


def failed(report):
    return {f['check']: f['message'] for f in report['failures']}


def warned(report):
    return {f['check']: f['message'] for f in report['warnings']}


# --------------------------------------------------------------------------
# healthy hosts pass
# --------------------------------------------------------------------------

def test_healthy_hgx_h200_passes():
    report = run()
    assert report['ok'], report['failures']
    assert report['failures'] == []
    assert report['warnings'] == []
    checks = {c['check'] for c in report['checks']}
    for name in ('driver.nvml', 'driver.kernel_module', 'driver.version', 'gpu.count', 'gpu.mig',
                 'gpu.persistence', 'gpu.ecc', 'gpu.row_remapping', 'fabric.manager', 'fabric.manager_version',
                 'fabric.state', 'podman.version', 'cdi.location', 'cdi.devices', 'cdi.stale', 'host.disk',
                 'host.shm', 'host.selinux', 'variant'):
        assert name in checks
    for check in report['checks']:
        assert set(('check', 'ok', 'found', 'expected', 'remedy', 'message')) <= set(check)


def test_a_host_reached_without_become_fails_once_with_the_remedy():
    """Without become, podman reports rootless storage and the disk check measures the wrong filesystem: the
    report says so, alone, naming the host, the user found and the remedy."""
    facts = host_facts()
    facts['effective_user'] = {'uid': 1000, 'name': 'deploy'}
    report = run(facts=facts)
    assert not report['ok']
    assert failed(report) == {'host.root': "gpu-node-01: tasks run as 'deploy', not root: set ansible_become: true "
                                           "(sudo) in the inventory"}
    assert report['checks'] == report['failures']
    facts['effective_user'] = {'uid': 0, 'name': 'root'}
    assert run(facts=facts)['ok']
    assert pc.summary(report).count('not root') == 1


@pytest.mark.parametrize('listen,ok', [
    ({'host': '0.0.0.0', 'api_key': False}, False),
    ({'host': '10.0.0.11', 'api_key': False}, False),
    ({'host': '0.0.0.0', 'api_key': True}, True),
    ({'host': '127.0.0.1', 'api_key': False}, True),
    ({'host': '::1', 'api_key': False}, True),
    ({'host': '0.0.0.0', 'api_key': False, 'allow_no_api_key': True}, True),
])
def test_a_server_beyond_loopback_needs_an_api_key(listen, ok):
    """vLLM listens with host networking: without a key it serves everyone who reaches the host (issue 36,
    finding 5). Refused before anything changes, naming the host, what was found and the remedy."""
    report = run(service_listen=listen)
    check = [c for c in report['checks'] if c['check'] == 'service.api_key'][0]
    assert check['ok'] is ok and report['ok'] is ok
    if not ok:
        assert failed(report) == {'service.api_key': 'gpu-node-01: vLLM would listen on %s with no API key, open to '
                                                     'anyone who reaches the host' % listen['host']}
        assert 'service_allow_no_api_key' in check['remedy'] and 'service_host: 127.0.0.1' in check['remedy']
    assert 'service.api_key' not in [c['check'] for c in run()['checks']]   # not asked, not checked


def test_every_failure_has_found_expected_and_remedy():
    report = run(gpu=make_gpu(count=7, fabric=('In Progress', None), mig_mode_current=True),
                 facts=host_facts(cdi_specs=[], podman={'found': False}, shm_bytes=64 * 1024 ** 2))
    assert [f['check'] for f in report['failures']] == [
        'gpu.count', 'gpu.mig', 'fabric.state', 'podman.version', 'cdi.spec', 'host.shm']
    msgs = failed(report)
    assert msgs['gpu.count'] == 'expected 8 GPUs for tensor_parallel_size=8, found 7'
    assert msgs['gpu.mig'] == ('MIG enabled on GPU 0, 1, 2, 3, 4, 5, 6 until the next GPU reset or reboot, '
                               'which disables it; vLLM TP=8 needs whole GPUs')
    assert msgs['fabric.state'] == ('fabric registration not complete on 7/7 GPUs after 0s (State=In Progress); '
                                    'CUDA will fail with error 802 (system not yet initialized)')
    assert msgs['host.shm'] == ('tensor_parallel_size=8 with --ipc=host but host /dev/shm is 64 MiB; '
                                'NCCL needs >= 1024 MiB')
    for fail in report['failures']:
        assert fail['remedy'], fail
        assert fail['found'] is not None and fail['expected'] is not None


def test_real_2gpu_h200_vm_without_podman_or_cdi():
    """The real test host: 2 GPUs, fabric Completed/Success, no NVSwitch seen, no podman, no CDI spec."""
    gpu = make_gpu(count=2)
    no_fm = {'installed': False, 'active': False, 'state': 'inactive', 'version': None}
    facts = host_facts(nvswitch_count=0, fabricmanager=no_fm,
                       cdi_specs=[], podman={'found': False, 'error': 'podman not found', 'graph_root': None})
    report = run(gpu=gpu, facts=facts, tensor_parallel_size=2)
    msgs = failed(report)
    assert set(msgs) == {'podman.version', 'cdi.spec'}
    assert 'podman is not installed' in msgs['podman.version']
    assert msgs['cdi.spec'] == ('no CDI spec for nvidia.com/gpu in /etc/cdi or /var/run/cdi; podman cannot pass '
                                'GPUs to the container')
    # Fabric manager runs on the hypervisor: not required in the guest, fabric state still checked.
    assert 'fabric.manager' not in {c['check'] for c in report['checks']}
    assert [c for c in report['checks'] if c['check'] == 'fabric.state'][0]['ok']


def test_same_host_at_tp8_reports_gpu_count_too():
    report = run(gpu=make_gpu(count=2), facts=host_facts(nvswitch_count=0), tensor_parallel_size=8)
    assert failed(report)['gpu.count'] == 'expected 8 GPUs for tensor_parallel_size=8, found 2'


# --------------------------------------------------------------------------
# F1: NVSwitch host, fabric manager not running, fabric In Progress
# --------------------------------------------------------------------------

def test_f1_fabric_manager_inactive_on_nvswitch_host():
    gpu = make_gpu(name='NVIDIA H100 80GB HBM3', driver='570.133.20', fabric=('In Progress', None))
    facts = host_facts(kernel_module_version='570.133.20', nvswitch_count=4,
                       fabricmanager={'installed': True, 'active': False, 'state': 'inactive',
                                      'version': '570.133.20'},
                       cdi_specs=[cdi_spec(gpu=gpu, driver='570.133.20')])
    report = run(gpu=gpu, facts=facts)
    msgs = failed(report)
    assert not report['ok']
    assert msgs['fabric.state'].startswith('fabric registration not complete on 8/8 GPUs after 0s (State=In Progress)')
    assert msgs['fabric.manager'] == ('nvidia-fabricmanager is inactive on an NVSwitch system (4 NVSwitch devices); '
                                      'install/start FM matching driver 570.133.20')
    assert 'fabricmanager' in report['fixable']
    assert report['fabric_pending'] is True


def test_f1_fabric_manager_not_installed():
    facts = host_facts(fabricmanager={'installed': False, 'active': False, 'state': None, 'version': None})
    report = run(gpu=make_gpu(fabric=('In Progress', None)), facts=facts)
    msgs = failed(report)
    assert 'nvidia-fabricmanager is not installed on an NVSwitch system' in msgs['fabric.manager']
    assert 'fabric.manager_version' not in msgs  # nothing to compare; one clear failure


def test_f1_same_fixture_completed_and_active_passes():
    report = run(gpu=make_gpu(name='NVIDIA H100 80GB HBM3'))
    assert report['ok']


def test_nvswitch_count_from_lspci():
    lspci = '\n'.join([
        '18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)',
        '05:00.0 Bridge: NVIDIA Corporation Device 22a3 (rev a1)',
        '06:00.0 Bridge: NVIDIA Corporation Device 22a3 (rev a1)',
        '07:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)',
        '08:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)',
    ])
    assert pc.count_nvswitch(lspci) == 4
    assert pc.count_nvswitch('00:06.0 3D controller: NVIDIA Corporation GH100 [H200 SXM 141GB] (rev a1)') == 0
    assert pc.count_nvswitch('') == 0


# --------------------------------------------------------------------------
# F2: fabric stays In Progress (VM, no NVSwitch in guest) and 7 of 8 GPUs
# --------------------------------------------------------------------------

def test_f2_two_distinct_failures():
    gpu = make_gpu(count=7, fabric=('In Progress', None))
    facts = host_facts(nvswitch_count=0, fabricmanager={'installed': False, 'active': False, 'version': None})
    report = run(gpu=gpu, facts=facts, fabric_waited_s=120)
    msgs = failed(report)
    assert msgs['gpu.count'] == 'expected 8 GPUs for tensor_parallel_size=8, found 7'
    assert msgs['fabric.state'].startswith('fabric registration not complete on 7/7 GPUs after 120s '
                                           '(State=In Progress)')
    assert 'vllm' not in ' '.join(msgs.values()).lower()
    fabric = [f for f in report['failures'] if f['check'] == 'fabric.state'][0]
    assert 'hypervisor' in fabric['remedy']


def test_fabric_null_state_is_not_checked():
    """GPUs without fabric (PCIe, older drivers) report null: nothing to check."""
    report = run(gpu=make_gpu(fabric=(None, None)), facts=host_facts(nvswitch_count=0))
    assert report['ok']
    assert 'fabric.state' not in {c['check'] for c in report['checks']}


def test_fabric_completed_with_failure_status_fails_without_pending():
    report = run(gpu=make_gpu(fabric=('Completed', 'Failure')))
    assert 'fabric.state' in failed(report)
    assert report['fabric_pending'] is False


# --------------------------------------------------------------------------
# F3: fabric manager version differs from the driver
# --------------------------------------------------------------------------

@pytest.mark.parametrize('state', [('active', True), ('failed', False), ('inactive', False)])
def test_f3_fabric_manager_version_mismatch_whatever_the_state(state):
    gpu = make_gpu(driver='530.41.03')
    facts = host_facts(kernel_module_version='530.41.03',
                       fabricmanager={'installed': True, 'active': state[1], 'state': state[0],
                                      'version': '530.30.02'},
                       cdi_specs=[cdi_spec(gpu=gpu, driver='530.41.03')])
    report = run(gpu=gpu, facts=facts, variant=dict(VARIANT, min_driver='530.30.02'))
    assert failed(report)['fabric.manager_version'] == 'fabric manager 530.30.02 does not match driver 530.41.03'


def test_f3_branch_name_is_not_a_version_match():
    facts = host_facts(fabricmanager={'installed': True, 'active': True, 'state': 'active', 'version': '580'})
    assert 'fabric.manager_version' in failed(run(facts=facts))


def test_fabric_manager_version_parsers():
    assert pc.parse_fabricmanager_version('Fabric Manager version is : 580.159.04\n') == '580.159.04'
    assert pc.parse_package_version('580.159.04-1') == '580.159.04'
    assert pc.parse_package_version('3:580.159.04-1.el9') == '580.159.04'
    assert pc.versions_equal('580.159.04', '580.159.4')
    assert not pc.versions_equal('530.30.02', '530.41.03')


# --------------------------------------------------------------------------
# F4: NVML driver/library mismatch
# --------------------------------------------------------------------------

APT_HISTORY = """Start-Date: 2021-05-10  06:12:01
Commandline: /usr/bin/apt-get install htop
Install: htop:amd64 (3.0.5-7)
End-Date: 2021-05-10  06:12:03

Start-Date: 2021-05-11  06:25:44
Commandline: /usr/bin/unattended-upgrade
Upgrade: libnvidia-common-460:amd64 (460.56-0ubuntu0.20.04.1, 460.73.01-0ubuntu0.20.04.1), libc6:amd64 (2.31-0, 2.31-1)
End-Date: 2021-05-11  06:26:10
"""


def test_f4_nvml_mismatch_names_versions_and_cause():
    event = pc.parse_apt_history_nvidia(APT_HISTORY)
    assert event['commandline'] == '/usr/bin/unattended-upgrade'
    assert event['packages'] == [{'name': 'libnvidia-common-460', 'old': '460.56-0ubuntu0.20.04.1',
                                  'new': '460.73.01-0ubuntu0.20.04.1'}]
    facts = host_facts(kernel_module_version=pc.parse_driver_version_file(
        'NVRM version: NVIDIA UNIX x86_64 Kernel Module  460.56  Tue Feb 23 23:23:59 UTC 2021\n'
        'GCC version:  gcc version 9.3.0 (Ubuntu 9.3.0-17ubuntu1~20.04)\n'),
        userspace_driver_versions=['460.73.01'], apt_nvidia_event=event)
    report = run(gpu_error='nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch',
                 facts=facts)
    msg = failed(report)['driver.nvml']
    assert msg == ('NVML driver/library version mismatch: user-space libraries 460.73.01 (upgraded by '
                   'unattended-upgrade), loaded kernel module 460.56; reboot required; pin driver packages')
    nvml = [f for f in report['failures'] if f['check'] == 'driver.nvml'][0]
    assert 'reboot' in nvml['remedy'] and 'hold' in nvml['remedy']
    # the other checks still ran: the report is complete
    assert 'cdi.location' in {c['check'] for c in report['checks']}


def test_f4_mismatch_without_library_versions_still_fails_on_the_message():
    report = run(gpu_error='Failed to initialize NVML: Driver/library version mismatch',
                 facts=host_facts(userspace_driver_versions=[]))
    assert failed(report)['driver.nvml'] == ('NVML driver/library version mismatch: user-space library version '
                                             'unknown, loaded kernel module 580.159.04; reboot required; pin driver '
                                             'packages')


def test_nvidia_smi_missing_is_a_failure_not_a_crash():
    report = run(gpu_error='nvidia-smi not found', facts=host_facts(kernel_module_version=None))
    msgs = failed(report)
    assert msgs['driver.nvml'] == 'nvidia-smi failed: nvidia-smi not found'
    assert msgs['driver.kernel_module'] == 'nvidia kernel module not loaded (no version file)'


def test_open_kernel_module_version_file():
    text = ('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  '
            '(dvs-builder@U22-I3-AE18-23-3)  Wed Jul 16 2025\n')
    assert pc.parse_driver_version_file(text) == '580.159.04'
    assert pc.parse_driver_version_file('') is None


def test_driver_below_variant_minimum():
    gpu = make_gpu(driver='570.124.06')
    facts = host_facts(kernel_module_version='570.124.06', fabricmanager={
        'installed': True, 'active': True, 'state': 'active', 'version': '570.124.06'},
        cdi_specs=[cdi_spec(driver='570.124.06')])
    msgs = failed(run(gpu=gpu, facts=facts))
    assert msgs == {'driver.version': 'driver 570.124.06 is older than the minimum 580.65.06 for this variant'}


def test_kernel_module_differs_from_nvidia_smi():
    msgs = failed(run(facts=host_facts(kernel_module_version='580.126.09')))
    assert 'driver.kernel_module_match' in msgs


# --------------------------------------------------------------------------
# F5: MIG
# --------------------------------------------------------------------------

def test_f5_mig_enabled_on_gpu0():
    gpu = make_gpu()
    gpu['gpus'][0].update(mig_mode_current=True, mig_mode_pending=True)
    report = run(gpu=gpu)
    assert failed(report)['gpu.mig'] == 'MIG enabled on GPU 0; vLLM TP=8 needs whole GPUs'
    mig = [f for f in report['failures'] if f['check'] == 'gpu.mig'][0]
    assert mig['found'] == 'GPU 0 current=Enabled pending=Enabled'
    assert mig['remedy'] == ('disable MIG (`nvidia-smi -i 0 -mig 0`) with no GPU process running, then reset the '
                             'GPUs (`nvidia-smi -r`) or reboot')


def test_f5_mig_pending_only_also_fails():
    gpu = make_gpu()
    gpu['gpus'][3]['mig_mode_pending'] = True
    report = run(gpu=gpu)
    assert failed(report)['gpu.mig'] == ('MIG disabled on GPU 3 but pending: will be enabled at the next GPU reset '
                                         'or reboot; vLLM TP=8 needs whole GPUs')
    mig = [f for f in report['failures'] if f['check'] == 'gpu.mig'][0]
    assert mig['found'] == 'GPU 3 current=Disabled pending=Enabled'
    assert mig['remedy'] == 'cancel the pending change (`nvidia-smi -i 3 -mig 0`); no reset needed'


def test_mig_not_supported_is_not_a_failure():
    assert run(gpu=make_gpu(mig_mode_current=None, mig_mode_pending=None))['ok']


# --------------------------------------------------------------------------
# GPU health: persistence, ECC, row remapping
# --------------------------------------------------------------------------

def test_persistence_ecc_and_remapping_reported_together():
    gpu = make_gpu()
    gpu['gpus'][1]['persistence_mode'] = False
    gpu['gpus'][2]['ecc_errors_uncorrected_volatile'] = 3
    gpu['gpus'][4]['remapped_rows_pending'] = True
    gpu['gpus'][5]['remapped_rows_failure'] = True
    report = run(gpu=gpu)
    msgs = failed(report)
    assert msgs['gpu.persistence'] == 'persistence mode off on GPU 1'
    assert msgs['gpu.ecc'] == 'uncorrected ECC errors on GPU 2 (3)'
    assert msgs['gpu.row_remapping'] == 'row remapping pending on GPU 4; row remapping failed on GPU 5'
    assert report['fixable'] == ['persistence']


def test_a_single_uncorrected_ecc_error_fails_the_host():
    """One uncorrected (volatile) ECC error is enough: the threshold is above 0, not above 1."""
    gpu = make_gpu()
    gpu['gpus'][6]['ecc_errors_uncorrected_volatile'] = 1
    report = run(gpu=gpu)
    assert not report['ok']
    assert failed(report) == {'gpu.ecc': 'uncorrected ECC errors on GPU 6 (1)'}
    check = [c for c in report['checks'] if c['check'] == 'gpu.ecc'][0]
    assert check['found'] == 'GPU 6: 1'
    # ECC counters that are unsupported (None) or zero are no failure.
    gpu['gpus'][6]['ecc_errors_uncorrected_volatile'] = None
    assert run(gpu=gpu)['ok']


# --------------------------------------------------------------------------
# F6: podman 5.5.1 reads only /etc/cdi
# --------------------------------------------------------------------------

def test_f6_spec_only_in_var_run_cdi_with_podman_551():
    facts = host_facts(cdi_specs=[cdi_spec(path='/var/run/cdi/nvidia.yaml')],
                       podman={'found': True, 'version': '5.5.1'})
    report = run(facts=facts)
    msg = failed(report)['cdi.location']
    assert msg == ('CDI spec in /var/run/cdi, but podman 5.5.1 reads only /etc/cdi, a known bug of this release '
                   '(see podman.known_bad)')
    location = [f for f in report['failures'] if f['check'] == 'cdi.location'][0]
    assert location['remedy'] == ('regenerate the spec in /etc/cdi with nvidia-ctk cdi generate '
                                  '--output=/etc/cdi/nvidia.yaml (preflight_fix: true does this), or add /var/run/cdi '
                                  'to cdi_spec_dirs in containers.conf, or upgrade podman')
    assert 'podman.known_bad' in warned(report)
    assert 'cdi' in report['fixable']


def test_f6_spec_in_etc_cdi_with_podman_551_passes():
    report = run(facts=host_facts(podman={'found': True, 'version': '5.5.1'}))
    assert report['ok'], report['failures']


def test_f6_spec_in_var_run_cdi_with_podman_542_passes():
    report = run(facts=host_facts(cdi_specs=[cdi_spec(path='/var/run/cdi/nvidia.yaml')]))
    assert report['ok'], report['failures']


def test_f6_cdi_spec_dirs_from_containers_conf_win():
    facts = host_facts(cdi_specs=[cdi_spec(path='/var/run/cdi/nvidia.yaml')],
                       podman={'found': True, 'version': '5.5.1'},
                       containers_conf_cdi_spec_dirs=['/etc/cdi', '/var/run/cdi'])
    assert run(facts=facts)['ok']
    assert pc.parse_containers_conf_cdi_dirs('[engine]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n') == \
        ['/etc/cdi', '/var/run/cdi']
    assert pc.parse_containers_conf_cdi_dirs('[engine]\n') is None


def test_known_bad_release_without_cdi_dirs_is_an_error():
    bad = [{'version': '5.7.1', 'reason': 'Notify=healthy readiness regression (podman#27771)'}]
    report = run(facts=host_facts(podman={'found': True, 'version': '5.7.1'}), podman_bad_versions=bad)
    assert failed(report)['podman.known_bad'] == ('podman 5.7.1 is a release known to break: Notify=healthy '
                                                  'readiness regression (podman#27771)')


# --------------------------------------------------------------------------
# F7: stale CDI spec after a driver upgrade
# --------------------------------------------------------------------------

STALE_SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
  - name: all
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
containerEdits:
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.161.07
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.161.07
    options: [ro, nosuid, nodev, bind]
"""


def test_f7_stale_spec_is_reported_with_versions_and_missing_paths():
    spec = pc.parse_cdi_spec(STALE_SPEC, '/etc/cdi/nvidia.yaml')  # line reader, as on hosts without PyYAML
    assert spec['kind'] == 'nvidia.com/gpu'
    assert spec['devices'] == ['0', 'all']
    assert spec['host_paths'] == ['/usr/lib/x86_64-linux-gnu/libcuda.so.535.161.07']
    spec['missing_host_paths'] = list(spec['host_paths'])
    gpu = make_gpu(count=1, driver='535.171.04', fabric=(None, None))
    facts = host_facts(kernel_module_version='535.171.04', cdi_specs=[spec], nvswitch_count=0)
    report = run(gpu=gpu, facts=facts, tensor_parallel_size=1, variant=dict(VARIANT, min_driver='535.0'))
    msgs = failed(report)
    assert msgs == {'cdi.stale': 'CDI spec /etc/cdi/nvidia.yaml built for 535.161.07, driver is 535.171.04 '
                                 '(1 missing hostPath)'}
    assert report['fixable'] == ['cdi']


def test_f7_line_reader_agrees_with_yaml():
    assert pc.parse_cdi_spec(STALE_SPEC, 'x', yaml.safe_load) == pc.parse_cdi_spec(STALE_SPEC, 'x')


# As `nvidia-ctk cdi generate` writes it: list items at column 0, a comment header.
CTK_SPEC = """---
# generated
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  mounts:
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    options:
    - ro
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- name: GPU-11111111-2222-3333-4444-555555555501
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
kind: nvidia.com/gpu
"""


def test_cdi_spec_as_nvidia_ctk_writes_it():
    spec = pc.parse_cdi_spec(CTK_SPEC, '/etc/cdi/nvidia.yaml')
    assert spec['kind'] == 'nvidia.com/gpu'
    assert spec['devices'] == ['0', 'GPU-11111111-2222-3333-4444-555555555501', 'all']
    assert spec['host_paths'] == ['/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04']
    assert pc.parse_cdi_spec(CTK_SPEC, '/etc/cdi/nvidia.yaml', yaml.safe_load) == spec


def test_cdi_json_spec_and_unparseable_spec():
    spec = pc.parse_cdi_spec('{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "all"}],'
                             ' "containerEdits": {"mounts": [{"hostPath": "/usr/lib/libcuda.so.580.159.04"}]}}',
                             '/etc/cdi/nvidia.json')
    assert spec['devices'] == ['all'] and spec['host_paths'] == ['/usr/lib/libcuda.so.580.159.04']
    assert pc.parse_cdi_spec('{broken', '/etc/cdi/x.json')['error'].startswith('cannot parse /etc/cdi/x.json')


def test_cdi_spec_missing_gpus_and_all():
    spec = cdi_spec()
    spec['devices'] = ['0', '1', '2']
    msg = failed(run(facts=host_facts(cdi_specs=[spec])))['cdi.devices']
    assert msg == ('CDI spec lacks nvidia.com/gpu=all, nvidia.com/gpu=3, nvidia.com/gpu=4, nvidia.com/gpu=5, '
                   'nvidia.com/gpu=6, nvidia.com/gpu=7')


def test_cdi_spec_by_uuid_only_counts():
    spec = cdi_spec()
    spec['devices'] = [g['uuid'] for g in make_gpu()['gpus']] + ['all']
    assert run(facts=host_facts(cdi_specs=[spec]))['ok']


def test_cdi_missing_hostpath_without_versioned_library():
    spec = cdi_spec(missing=['/dev/nvidia-uvm'])
    assert failed(run(facts=host_facts(cdi_specs=[spec])))['cdi.stale'] == (
        'CDI spec /etc/cdi/nvidia.yaml built for another driver, driver is 580.159.04 (1 missing hostPath)')


# --------------------------------------------------------------------------
# F8: shared memory
# --------------------------------------------------------------------------

def test_f8_ipc_host_off_warns():
    report = run(facts=host_facts(shm_bytes=64 * 1024 ** 2), service_ipc_host=False)
    assert report['ok']
    assert warned(report)['host.shm'].startswith('tensor_parallel_size=8 but container /dev/shm left at default; '
                                                 'add --ipc=host or shm size >= 1024 MiB')


def test_f8_ipc_host_with_small_host_shm_fails():
    msg = failed(run(facts=host_facts(shm_bytes=64 * 1024 ** 2)))['host.shm']
    assert msg == 'tensor_parallel_size=8 with --ipc=host but host /dev/shm is 64 MiB; NCCL needs >= 1024 MiB'


def test_tp1_needs_no_shm():
    report = run(gpu=make_gpu(count=1), facts=host_facts(shm_bytes=1), tensor_parallel_size=1)
    assert 'host.shm' not in failed(report)


# --------------------------------------------------------------------------
# F13: podman too old for quadlet; podman missing
# --------------------------------------------------------------------------

def test_f13_podman_431_has_no_quadlet():
    report = run(facts=host_facts(podman={'found': True, 'version': pc.parse_podman_version(
        'podman version 4.3.1\n')}))
    assert failed(report)['podman.version'].startswith('podman 4.3.1 has no quadlet support')


def test_podman_44_passes():
    assert run(facts=host_facts(podman={'found': True, 'version': '4.4.0'}))['ok']


@pytest.mark.parametrize('version,ok', [('4.4.0', False), ('4.6.2', False), ('4.7.0', True), ('5.4.2', True)])
def test_an_api_key_needs_podman_47(version, ok):
    """Older podman re-creates the API key's secret on every run: a change, so a restart on every rollout."""
    report = run(facts=host_facts(podman={'found': True, 'version': version}), podman_api_key_min_version='4.7')
    assert report['ok'] is ok
    if not ok:
        assert failed(report)['podman.api_key'].startswith('podman %s re-creates the API key' % version)
    # without an API key, 4.4 is enough
    assert run(facts=host_facts(podman={'found': True, 'version': version}))['ok']


# --------------------------------------------------------------------------
# disk and variant
# --------------------------------------------------------------------------

def test_disk_space_summed_per_filesystem():
    disk = {'hub_cache': {'path': '/srv/hub', 'existing': '/srv', 'device': 2, 'free_bytes': 600 * GIB},
            'graphroot': {'path': '/var/lib/containers/storage', 'existing': '/var/lib', 'device': 1,
                          'free_bytes': 60 * GIB},
            'tmpdir': {'path': '/var/tmp', 'existing': '/var/tmp', 'device': 1, 'free_bytes': 60 * GIB}}
    report = run(facts=host_facts(disk=disk))
    msgs = [f['message'] for f in report['failures'] if f['check'] == 'host.disk']
    # 551 GiB * 1.10 = 606 GiB needed on /srv; 50 + 20 GiB needed on /var (60 free)
    assert len(msgs) == 2
    assert any(m.startswith("need 606.3 GiB at /srv for hub_cache (/srv/hub: estimated from model.size_bytes: the "
                            "hub's file list was not read), 600.0 GiB free") for m in msgs), msgs
    assert any(m.startswith('need 70.0 GiB at /var/lib') for m in msgs)


def test_disk_counts_what_is_already_downloaded():
    disk = {'hub_cache': {'path': '/srv/hub', 'existing': '/srv/hub', 'device': 2, 'free_bytes': 100 * GIB}}
    facts = host_facts(disk=disk, hub_cache_model_bytes=540 * GIB)
    assert run(facts=facts)['ok']


def test_variant_refusal_is_a_failure_in_the_report():
    report = run(variant=None)
    assert failed(report)['variant'] == 'no Inkling variant for gpu-node-01: no variant for 7 x NVIDIA H200'
    variant = [f for f in report['failures'] if f['check'] == 'variant'][0]
    assert variant['remedy'] == 'fix the variant table or inkling_variant_overrides as the message says'
    assert 'driver.version' not in {c['check'] for c in report['checks']}


def test_summary_names_host_and_every_failure():
    report = run(gpu=make_gpu(count=7), facts=host_facts(podman={'found': False}))
    text = pc.summary(report)
    assert text.startswith('gpu-node-01: preflight failed (2 problems):')
    assert '[gpu.count] expected 8 GPUs' in text and '[podman.version]' in text


def test_evaluate_does_not_mutate_inputs():
    facts = host_facts()
    gpu = make_gpu()
    before = (copy.deepcopy(facts), copy.deepcopy(gpu))
    run(gpu=gpu, facts=facts)
    assert (facts, gpu) == before


def test_version_helpers():
    assert pc.version_ge('4.4', '4.4')
    assert pc.version_ge('5.4.2', '4.4')
    assert not pc.version_ge('4.3.1', '4.4')
    assert not pc.version_ge(None, '4.4')
    assert pc.so_versions(['/usr/lib/libcuda.so.580.159.04', '/usr/lib/libcuda.so.1', '/dev/nvidia0']) == \
        ['580.159.04']


def test_unknown_model_size_is_a_warning():
    variant = dict(VARIANT, model={'repo_id': 'x', 'size_bytes': None})
    report = run(variant=variant)
    assert report['ok']
    assert 'host.disk_model_size' in warned(report)


def test_variant_mount_source_missing_is_a_failure_naming_the_cubins():
    """Seen in the lab: podman refused to start the sm100 unit, `statfs
    /var/lib/inkling/flashinfer-cubins: no such file or directory`. Preflight catches it first."""
    variant = {'name': 'sm100', 'mounts': [{'source': '/var/lib/inkling/flashinfer-cubins',
                                            'target': '/opt/flashinfer/cubins', 'options': 'ro'}]}
    missing = pc.check_mounts(variant, {'/var/lib/inkling/flashinfer-cubins': False})
    assert len(missing) == 1 and missing[0]['ok'] is False
    assert missing[0]['check'] == 'variant.mounts'
    assert 'does not exist on this host' in missing[0]['message']
    assert 'flashinfer download-cubin' in missing[0]['remedy']
    present = pc.check_mounts(variant, {'/var/lib/inkling/flashinfer-cubins': True})
    assert present[0]['ok'] is True
    assert pc.check_mounts({'name': 'sm90-patched', 'mounts': []}, {}) == []


# --------------------------------------------------------------------------
# issue 22: each root cause once; the variant check points at it
# --------------------------------------------------------------------------

def refusal(check, message, remedy):
    return {'check': check, 'message': message, 'remedy': remedy,
            'reason': 'gpu-node-01: %s. Remedy: %s.' % (message, remedy)}


COUNT = refusal('gpu.count', 'found 7 GPU(s); tensor parallel size 8 needs 8', 'use a host with 8 GPUs')
MIG = refusal('gpu.mig', 'MIG is enabled or pending (GPU 0 current=Enabled pending=Enabled)', 'disable MIG')
MEMORY = refusal('gpu.memory', 'the 8 GPU(s) of the tensor parallel group have 652472 MiB (637.2 GiB) in total; '
                 'thinkingmachines/Inkling-NVFP4 (entry sm90-patched) needs at least 666624 MiB (651.0 GiB)',
                 'use GPUs with more memory (for example 8x H200 or 8x B200), or a smaller model')
OLD_DRIVER = refusal('driver.version', 'driver 550.90.07 is older than 580.65.06, which entry sm90-patched needs',
                     'upgrade the NVIDIA driver (and fabric manager, same version) to 580.65.06 or newer')
NO_ENTRY = refusal('variant', 'found compute capability 8.0; no enabled variant of thinkingmachines/Inkling-NVFP4 '
                   'supports it (supported: 9.0, 10.0)',
                   'run this model on supported GPUs, or add a tested entry through inkling_variant_overrides')


def refused_run(refs, gpu=None, **kw):
    return run(gpu=gpu, variant=None, variant_refusals=refs, **kw)


def by_check(report, name):
    return [f for f in report['failures'] if f['check'] == name]


def test_mig_is_reported_once_and_the_variant_points_at_it():
    gpu = make_gpu()
    gpu['gpus'][0].update(mig_mode_current=True, mig_mode_pending=True)
    report = refused_run([MIG], gpu=gpu)
    msgs = failed(report)
    assert set(msgs) == {'gpu.mig', 'variant'}
    assert msgs['variant'] == 'no variant selected: blocked by gpu.mig (reported there)'
    variant = by_check(report, 'variant')[0]
    assert variant['remedy'] == 'fix what gpu.mig reports; the variant is selected once it passes'
    assert variant['blocked_by'] == ['gpu.mig']
    assert 'inkling_variant_overrides' not in variant['remedy']
    # the variant check comes after the checks it points at
    names = [c['check'] for c in report['checks']]
    assert names.index('variant') > names.index('gpu.mig')
    assert len(by_check(report, 'variant')) == 1


def test_count_and_mig_together_are_one_pointer():
    gpu = make_gpu(count=7)
    gpu['gpus'][0].update(mig_mode_current=True, mig_mode_pending=True)
    report = refused_run([COUNT, MIG], gpu=gpu)
    assert set(failed(report)) == {'gpu.count', 'gpu.mig', 'variant'}
    assert failed(report)['variant'] == 'no variant selected: blocked by gpu.count, gpu.mig (reported there)'
    assert by_check(report, 'variant')[0]['remedy'] == ('fix what gpu.count, gpu.mig report; the variant is '
                                                        'selected once they pass')


def test_memory_becomes_its_own_finding_with_its_own_remedy():
    report = refused_run([MEMORY])
    msgs = failed(report)
    assert set(msgs) == {'gpu.memory', 'variant'}
    memory = by_check(report, 'gpu.memory')[0]
    assert memory['message'] == MEMORY['message']
    assert memory['remedy'] == 'use GPUs with more memory (for example 8x H200 or 8x B200), or a smaller model'
    assert msgs['variant'] == 'no variant selected: blocked by gpu.memory (reported there)'


def test_old_driver_refusal_becomes_the_driver_version_finding():
    report = refused_run([OLD_DRIVER])
    assert failed(report) == {'driver.version': OLD_DRIVER['message'],
                              'variant': 'no variant selected: blocked by driver.version (reported there)'}


def test_a_refusal_whose_check_passed_is_kept_in_the_variant_finding():
    # gpu.mig passes on these GPUs: the reason must not be lost
    report = refused_run([MIG])
    assert set(failed(report)) == {'variant'}
    assert failed(report)['variant'] == 'no Inkling variant fits gpu-node-01: ' + MIG['message']
    assert by_check(report, 'variant')[0]['remedy'] == 'disable MIG'


def test_table_reasons_keep_their_own_remedy_and_name_the_root_causes_too():
    gpu = make_gpu(count=7)
    report = refused_run([COUNT, NO_ENTRY], gpu=gpu)
    msgs = failed(report)
    assert set(msgs) == {'gpu.count', 'variant'}
    assert msgs['variant'] == ('no Inkling variant fits gpu-node-01: ' + NO_ENTRY['message']
                               + '; also blocked by gpu.count')
    assert by_check(report, 'variant')[0]['remedy'] == NO_ENTRY['remedy'] + '; and fix what gpu.count reports'


def test_without_gpu_facts_the_variant_points_at_driver_nvml():
    report = run(gpu_error='nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch',
                 variant=None, variant_error=None)
    assert failed(report)['variant'] == 'no variant selected: blocked by driver.nvml (reported there)'


# --------------------------------------------------------------------------
# issue 22: NVML mismatch names both versions; no fabric manager comparison with "unknown"
# --------------------------------------------------------------------------

MISMATCH = ('Failed to initialize NVML: Driver/library version mismatch (user-space NVML library 580.159). The '
            'loaded nvidia kernel module and the user-space driver library (NVML) are different versions')


def test_nvml_mismatch_names_the_version_nvidia_smi_printed_and_the_kernel_module():
    facts = host_facts(kernel_module_version='580.126.09', userspace_driver_versions=[DRIVER])
    report = run(gpu_error=MISMATCH, facts=facts, variant=None, nvml_library_version='580.159')
    assert set(failed(report)) == {'driver.nvml', 'variant'}
    assert failed(report)['driver.nvml'] == ('NVML driver/library version mismatch: nvidia-smi reports user-space '
                                             'library 580.159, loaded kernel module 580.126.09; reboot required; '
                                             'pin driver packages')
    nvml = by_check(report, 'driver.nvml')[0]
    assert nvml['nvml_library_version'] == '580.159' and nvml['kernel_module_version'] == '580.126.09'


def test_nvml_mismatch_reads_the_version_from_the_message_when_not_given():
    report = run(gpu_error=MISMATCH, facts=host_facts(), variant=None)
    assert failed(report)['driver.nvml'].startswith('NVML driver/library version mismatch: nvidia-smi reports '
                                                    'user-space library 580.159, loaded kernel module 580.159.04;')
    assert pc.nvml_library_version('Failed ...\nNVML library version: 535.183\n') == '535.183'
    assert pc.nvml_library_version('nvidia-smi failed') is None


def test_nvml_mismatch_lists_installed_libraries_that_disagree_with_nvml():
    facts = host_facts(kernel_module_version='580.126.09', userspace_driver_versions=['580.126.09', '580.159.04'],
                       apt_nvidia_event={'commandline': '/usr/bin/unattended-upgrade', 'packages': []})
    report = run(gpu_error=MISMATCH, facts=facts, variant=None, nvml_library_version='580.173')
    assert failed(report)['driver.nvml'] == (
        'NVML driver/library version mismatch: nvidia-smi reports user-space library 580.173 (upgraded by '
        'unattended-upgrade), installed libraries 580.159.04, loaded kernel module 580.126.09; reboot required; '
        'pin driver packages')


def test_versions_agree_on_the_parts_nvml_prints():
    assert pc.versions_agree('580.159', '580.159.04')
    assert pc.versions_agree('580.159.04', '580.159.4')
    assert not pc.versions_agree('580.173', '580.159.04')
    assert not pc.versions_agree('580.159.04', '580.159')
    assert not pc.versions_agree(None, '580.159.04')


def test_fabric_manager_version_is_not_compared_without_a_driver_version():
    facts = host_facts(kernel_module_version='580.126.09')
    report = run(gpu_error=MISMATCH, facts=facts, variant=None)
    assert 'fabric.manager_version' not in failed(report)
    fm = [c for c in report['checks'] if c['check'] == 'fabric.manager_version'][0]
    assert fm['ok'] and fm['skipped']
    assert fm['message'] == ('fabric manager 580.159.04 not compared: nvidia-smi reports no driver version '
                             '(see driver.nvml); compared once nvidia-smi answers')
    assert 'unknown' not in ' '.join(f['message'] for f in report['failures'])
    stale = [c for c in report['checks'] if c['check'] == 'cdi.stale'][0]
    assert stale['ok'] and stale['skipped'] and 'None' not in stale['message']


def test_fabric_manager_down_without_a_driver_version_says_the_driver():
    facts = host_facts(fabricmanager={'installed': True, 'active': False, 'state': 'inactive', 'version': DRIVER})
    msg = failed(run(gpu_error=MISMATCH, facts=facts, variant=None))['fabric.manager']
    assert msg == ('nvidia-fabricmanager is inactive on an NVSwitch system (4 NVSwitch devices); install/start FM '
                   'matching the driver')


# --------------------------------------------------------------------------
# issue 22: MIG wording, cdi.location wording
# --------------------------------------------------------------------------

def test_mig_enabled_until_the_next_reset():
    gpu = make_gpu()
    gpu['gpus'][2].update(mig_mode_current=True, mig_mode_pending=False)
    report = run(gpu=gpu)
    assert failed(report)['gpu.mig'] == ('MIG enabled on GPU 2 until the next GPU reset or reboot, which disables it; '
                                         'vLLM TP=8 needs whole GPUs')
    assert by_check(report, 'gpu.mig')[0]['remedy'] == 'reset the GPUs (`nvidia-smi -i 2 -r`) or reboot'


def test_mig_enabled_and_pending_on_several_gpus():
    gpu = make_gpu()
    gpu['gpus'][0].update(mig_mode_current=True, mig_mode_pending=True)
    gpu['gpus'][1].update(mig_mode_current=True, mig_mode_pending=True)
    gpu['gpus'][5].update(mig_mode_current=False, mig_mode_pending=True)
    report = run(gpu=gpu)
    assert failed(report)['gpu.mig'] == ('MIG enabled on GPU 0, 1; MIG disabled on GPU 5 but pending: will be enabled '
                                         'at the next GPU reset or reboot; vLLM TP=8 needs whole GPUs')
    assert by_check(report, 'gpu.mig')[0]['remedy'] == (
        'disable MIG (`nvidia-smi -i 0,1 -mig 0`) with no GPU process running, then reset the GPUs (`nvidia-smi -r`) '
        'or reboot; cancel the pending change (`nvidia-smi -i 5 -mig 0`); no reset needed')


def test_cdi_location_with_cdi_spec_dirs_from_containers_conf():
    facts = host_facts(cdi_specs=[cdi_spec(path='/var/run/cdi/nvidia.yaml')], containers_conf_cdi_spec_dirs=['/etc/cdi'])
    report = run(facts=facts)
    assert failed(report)['cdi.location'] == ('CDI spec in /var/run/cdi, but podman 5.4.2 reads only /etc/cdi, as '
                                              'cdi_spec_dirs in containers.conf says')
    assert by_check(report, 'cdi.location')[0]['remedy'] == (
        'regenerate the spec in /etc/cdi with nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml '
        '(preflight_fix: true does this), or add /var/run/cdi to cdi_spec_dirs in containers.conf')


def test_no_message_nests_parentheses():
    facts = host_facts(cdi_specs=[cdi_spec(path='/var/run/cdi/nvidia.yaml')], podman={'found': True, 'version': '5.5.1'})
    report = run(facts=facts, podman_bad_versions=[{
        'version': '5.5.1', 'cdi_spec_dirs': ['/etc/cdi'], 'remedy': 'upgrade podman',
        'reason': 'its default cdi_spec_dirs lists only /etc/cdi (podman#26569, fixed by containers/common#2462)'}])
    for fail in report['failures']:
        for text in (fail['message'], fail['remedy']):
            depth = 0
            for char in text:
                depth += {'(': 1, ')': -1}.get(char, 0)
                assert depth <= 1, text


# --------------------------------------------------------------------------
# issue 22: the fabric wait
# --------------------------------------------------------------------------

class FakeClock(object):
    """time.monotonic/time.sleep stand-ins; each poll takes ``poll_takes`` seconds."""

    def __init__(self, poll_takes=0.4):
        self.now = 1000.0
        self.poll_takes = poll_takes
        self.polls = []
        self.lines = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.now += seconds

    def poller(self, states):
        """poll() returning the fabric states of ``states`` in turn (the last one repeats)."""
        def poll():
            self.polls.append(round(self.now - 1000.0, 2))
            gpu = make_gpu(fabric=states[min(len(self.polls), len(states)) - 1])
            self.now += self.poll_takes
            return gpu, None
        return poll


def test_fabric_wait_lasts_the_whole_documented_time():
    fake = FakeClock()
    out = pc.wait_for_fabric(fake.poller([('In Progress', None)]), fake.sleep, fake.clock, 120, 10,
                             show=fake.lines.append, host='gpu-node-01')
    # 12 delays of 10 s: polls at 10, 20, ... 120 s (the check before the wait was the poll at 0)
    assert fake.polls == [float(t) for t in range(10, 121, 10)]
    assert out == {'waited_s': 120, 'rounds': 12, 'registered': 0, 'total': 8, 'complete': False, 'error': None}
    assert fake.lines[0] == 'gpu-node-01 - fabric registration 0 of 8 GPUs after 10s of 120s'
    assert fake.lines[-1] == 'gpu-node-01 - fabric registration 0 of 8 GPUs after 120s of 120s'
    assert len(fake.lines) == 12


def test_fabric_wait_stops_when_registration_completes():
    fake = FakeClock()
    poll = fake.poller([('In Progress', None), ('Completed', 'Success')])
    out = pc.wait_for_fabric(poll, fake.sleep, fake.clock, 120, 10, show=fake.lines.append, host='h')
    assert out['complete'] and out['rounds'] == 2 and out['waited_s'] == 20 and out['registered'] == 8
    assert fake.lines == ['h - fabric registration 0 of 8 GPUs after 10s of 120s',
                          'h - fabric registration 8 of 8 GPUs after 20s of 120s, done']


def test_fabric_wait_with_slow_polls_still_polls_at_the_end():
    fake = FakeClock(poll_takes=2.5)
    out = pc.wait_for_fabric(fake.poller([('In Progress', None)]), fake.sleep, fake.clock, 4, 2)
    assert fake.polls == [2.0, 4.5]
    assert out['waited_s'] == 4 and out['rounds'] == 2


def test_fabric_wait_not_a_multiple_of_the_poll_interval():
    fake = FakeClock(poll_takes=0)
    pc.wait_for_fabric(fake.poller([('In Progress', None)]), fake.sleep, fake.clock, 25, 10)
    assert fake.polls == [10.0, 20.0, 25.0]


def test_fabric_wait_stops_when_nvidia_smi_fails():
    fake = FakeClock()
    lines = []

    def poll():
        return None, 'nvidia-smi failed: No devices were found'
    out = pc.wait_for_fabric(poll, fake.sleep, fake.clock, 120, 10, show=lines.append, host='h')
    assert out['rounds'] == 1 and out['error'] == 'nvidia-smi failed: No devices were found'
    assert lines == ['h - fabric wait stopped after 10s: nvidia-smi failed: No devices were found']


def test_fabric_wait_delay_schedule():
    assert pc.fabric_wait_delay(0, 0.0, 120, 10) == 10
    assert pc.fabric_wait_delay(10.0, 10.3, 120, 10) == pytest.approx(9.7)
    assert pc.fabric_wait_delay(110.0, 111.0, 120, 10) == pytest.approx(9.0)
    assert pc.fabric_wait_delay(120.0, 120.2, 120, 10) is None
    assert pc.fabric_wait_delay(0, 0.0, 0, 10) is None


def test_fabric_progress_counts_registered_gpus():
    gpu = make_gpu(fabric=('In Progress', None))
    gpu['gpus'][0].update(fabric_state='Completed', fabric_status='Success')
    assert pc.fabric_progress(gpu) == {'registered': 1, 'total': 8, 'pending': True}
    assert pc.fabric_progress(None) == {'registered': 0, 'total': 0, 'pending': False}


# --------------------------------------------------------------------------
# issue 37: no remedy leads to another refusal. Each remedy about the tensor parallel size is taken
# as written and fed back into preflight (the variant table, then the checks); it passes, or the
# remedy said plainly that no setting fixes it.
# --------------------------------------------------------------------------

BIG = 'thinkingmachines/Inkling-NVFP4'
SMALL = 'thinkingmachines/Inkling-Small-NVFP4'
TP_CHECKS = ('gpu.count', 'gpu.memory', 'driver.version', 'variant')


def gpus_like(gpu, count):
    """``count`` GPUs of the kind of ``gpu``'s first one."""
    out = copy.deepcopy(gpu)
    out['gpus'] = [dict(out['gpus'][0], index=i, uuid='GPU-%02d' % i) for i in range(count)]
    out['gpu_count'] = count
    out['memory_total_mib'] = count * out['gpus'][0]['memory_total_mib']
    return out


def gb200(count=4):
    gpu = make_gpu(count=count, name='NVIDIA GB200', compute_cap='10.0', compute_cap_major=10,
                   memory_total_mib=189471)
    gpu.update(compute_caps=['10.0'], architecture='blackwell', memory_total_mib=189471 * count)
    return gpu


def preflight(gpu, model, tp, overrides=None):
    """The preflight role's decision, offline: inkling_variant's pick (or refusals), then evaluate;
    the failures of the checks a tensor parallel size decides."""
    table, version = default_table()
    try:
        variant, _reasons = vt.select_variant(gpu, model, tp, table, overrides=overrides, host='gpu-node-01',
                                              schema_version=version)
        refusals, error = [], None
    except vt.VariantRefused as exc:
        variant, refusals, error = None, exc.refusals, str(exc)
    report = run(gpu=gpu, facts=host_facts(cdi_specs=[cdi_spec(gpu=gpu)]), variant=variant,
                 variant_refusals=refusals, variant_error=error, tensor_parallel_size=tp)
    return [f for f in report['failures'] if f['check'] in TP_CHECKS]


def entry_for(model, cap, tp):
    """A tested entry of tensor parallel size ``tp``, as an operator would add it: the table's entry
    for this model and compute capability, with its size and --tensor-parallel-size changed."""
    table, _version = default_table()
    name, entry = [(n, e) for n, e in sorted(table.items()) if e.get('enabled', True)
                   and e['model']['repo_id'] == model and cap in e['compute_caps']
                   and not e.get('nodes_per_replica')][0]
    entry = copy.deepcopy(entry)
    entry['tensor_parallel_size'] = tp
    args = entry['vllm_args']
    args[args.index('--tensor-parallel-size') + 1] = str(tp)
    entry['priority'] = 99
    return {'%s-tp%d' % (name, tp): entry}


def follow(gpu, model, tp, remedy):
    """Take a remedy's advice on the tensor parallel size; returns what it was told to try (a list),
    each (description, failures of the next preflight)."""
    cap = gpu['compute_caps'][0]
    tried = []
    added = re.search(r'add a tested entry of tensor parallel size (\d+) .*?then set inkling_tensor_parallel_size '
                      r'to (\d+)', remedy)
    if added:
        size = int(added.group(2))
        tried.append(('entry tp %d' % size, preflight(gpu, model, size, entry_for(model, cap, size))))
    for size in re.findall(r'set inkling_tensor_parallel_size to (\d+): entry', remedy):
        tried.append(('tp %s' % size, preflight(gpu, model, int(size))))
    host = re.search(r'a host with (?:exactly )?([\d or]+?) (?:such )?GPUs', remedy)
    if host and not re.search(r'\buse a host with %d GPUs' % tp, remedy):
        for count in re.findall(r'\d+', host.group(1)):
            tried.append(('%s GPUs' % count, preflight(gpus_like(gpu, int(count)), model, int(count))))
    return tried


@pytest.mark.parametrize('name,gpu,model,tp', [
    ('GB200 x4 at TP 8', gb200(4), BIG, 8),
    ('GB200 x4 at TP 4', gb200(4), BIG, 4),
    ('H200 x8 with a GPU missing', make_gpu(count=7), BIG, 8),
    ('H200 x2, the 975B model', make_gpu(count=2), BIG, 8),
    ('H200 x2, Inkling-Small at TP 8', make_gpu(count=2), SMALL, 8),
    ('H200 x8 at TP 4', make_gpu(count=8), BIG, 4),
    ('GB200 x2, Inkling-Small at TP 4', gb200(2), SMALL, 4),
    ('H200 x8, Inkling-Small at TP 2', make_gpu(count=8), SMALL, 2),
])
def test_each_tensor_parallel_remedy_passes_the_check_that_follows(name, gpu, model, tp):
    failures = preflight(gpu, model, tp)
    assert failures, name
    advised = 0
    for fail in failures:
        remedy = fail['remedy']
        if 'tensor parallel' not in remedy and 'GPUs' not in remedy:
            continue
        # the remedy the issue saw: it named no size and led to "set the tensor parallel size to one of 8"
        assert 'to the number of GPUs' not in remedy and 'one of' not in remedy, remedy
        tried = follow(gpu, model, tp, remedy)
        for what, after in tried:
            assert after == [], '%s: %s -> %s: %s' % (name, fail['check'], what, after)
        fixable_here = [w for w, _a in tried if w.startswith('tp ')]
        if not fixable_here:
            assert ('no setting of inkling_tensor_parallel_size fixes it' in remedy
                    or fail['check'] != 'gpu.count' or gpu['gpu_count'] > tp), remedy
        advised += len(tried)
    assert advised, name


def test_gb200_x4_is_told_plainly_that_it_cannot_serve_the_975b_model_alone():
    failures = dict((f['check'], f) for f in preflight(gb200(4), BIG, 8))
    assert failures['gpu.count']['remedy'] == (
        'if GPUs are missing, check nvidia-smi -L, fabric manager and the kernel log for Xid errors; otherwise this '
        'host cannot serve thinkingmachines/Inkling-NVFP4 alone: no enabled variant for compute capability 10.0 '
        'uses its 4 GPU(s) (entries use tensor parallel size 8), so no setting of inkling_tensor_parallel_size '
        'fixes it; serve it from a host with 8 such GPUs (and inkling_tensor_parallel_size set to that number)')
