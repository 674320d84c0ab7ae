# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Preflight checks: every field failure (F1-F8, F13 of docs/field-failures.md) as input -> message.

GPU facts follow the ``nvidia_gpu`` schema of docs/architecture.md. The healthy 2x H200 host is the
real capture in ``shared/fixtures/nvidia-smi/h200-2gpu-driver580`` (driver 580.159.04, fabric
Completed/Success, no NVSwitch in the guest, no podman, no CDI spec).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc

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
    return pc.evaluate('gpu-node-01', gpu=gpu if gpu is not None or gpu_error else make_gpu(),
                       gpu_error=gpu_error, host_facts=facts or host_facts(), variant=variant,
                       variant_error=None if variant else 'no variant for 7 x NVIDIA H200', **kw)


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


def test_every_failure_has_found_expected_and_remedy():
    report = run(gpu=make_gpu(count=7, fabric=('In Progress', None), mig_mode_current=True),
                 facts=host_facts(cdi_specs=[], podman={'found': False}, shm_bytes=64 * 1024 ** 2))
    assert [f['check'] for f in report['failures']] == [
        'gpu.count', 'gpu.mig', 'fabric.state', 'podman.version', 'cdi.spec', 'host.shm']
    msgs = failed(report)
    assert msgs['gpu.count'] == 'expected 8 GPUs for tensor_parallel_size=8, found 7'
    assert msgs['gpu.mig'].startswith('MIG enabled on GPU 0 (current=Enabled, pending=Disabled), GPU 1 ')
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
    assert msg == ('NVML driver/library version mismatch: loaded kernel module 460.56 != user-space 460.73.01 '
                   '(upgraded by unattended-upgrade); reboot required; pin driver packages')
    nvml = [f for f in report['failures'] if f['check'] == 'driver.nvml'][0]
    assert 'reboot' in nvml['remedy'] and 'hold' in nvml['remedy']
    # the other checks still ran: the report is complete
    assert 'cdi.location' in {c['check'] for c in report['checks']}


def test_f4_mismatch_without_library_versions_still_fails_on_the_message():
    report = run(gpu_error='Failed to initialize NVML: Driver/library version mismatch',
                 facts=host_facts(userspace_driver_versions=[]))
    assert failed(report)['driver.nvml'].startswith('NVML driver/library version mismatch: loaded kernel module '
                                                    '580.159.04')


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
    msg = failed(run(gpu=gpu))['gpu.mig']
    assert msg == ('MIG enabled on GPU 0 (current=Enabled, pending=Enabled); vLLM TP=8 needs whole GPUs; '
                   'disable MIG (`nvidia-smi -mig 0`) and reset')


def test_f5_mig_pending_only_also_fails():
    gpu = make_gpu()
    gpu['gpus'][3]['mig_mode_pending'] = True
    assert 'GPU 3 (current=Disabled, pending=Enabled)' in failed(run(gpu=gpu))['gpu.mig']


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
    assert msg.startswith('nvidia-ctk sees the spec in /var/run/cdi but podman 5.5.1 only reads /etc/cdi')
    assert msg.endswith('write the spec to /etc/cdi or set cdi_spec_dirs')
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
    assert any(m.startswith('need 606.3 GiB at /srv for hub_cache (/srv/hub), 600.0 GiB free') for m in msgs)
    assert any(m.startswith('need 70.0 GiB at /var/lib') for m in msgs)


def test_disk_counts_what_is_already_downloaded():
    disk = {'hub_cache': {'path': '/srv/hub', 'existing': '/srv/hub', 'device': 2, 'free_bytes': 100 * GIB}}
    facts = host_facts(disk=disk, hub_cache_model_bytes=540 * GIB)
    assert run(facts=facts)['ok']


def test_variant_refusal_is_a_failure_in_the_report():
    report = run(variant=None)
    assert failed(report)['variant'] == 'no Inkling variant fits gpu-node-01: no variant for 7 x NVIDIA H200'
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
