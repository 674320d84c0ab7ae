# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Parsing and error handling of nvidia-smi output (module_utils/nvidia_smi.py)."""

import os

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import nvidia_smi as smi
from inkling_test_helpers import (FakeSmi, capture_rows, capture_text, h200_rows, public_rows,
                                  write_fake_smi)


def collect(runner, **kwargs):
    return smi.collect('nvidia-smi', runner=runner, **kwargs)


def test_real_h200_capture_gives_the_contract_facts():
    runner = FakeSmi(capture_rows(), nvlink_text=capture_text('nvlink.txt'), topo_text=capture_text('topo.txt'),
                     lspci_text='')
    facts, warnings = collect(runner, lspci='/usr/bin/lspci')
    assert warnings == []
    assert facts['driver_version'] == '580.159.04'
    assert facts['cuda_version'] == '13.0'
    assert facts['gpu_count'] == 2
    assert facts['architecture'] == 'hopper'
    assert facts['compute_caps'] == ['9.0']
    assert facts['memory_total_mib'] == 2 * 143771
    assert facts['unsupported_fields'] == []
    gpu0 = facts['gpus'][0]
    assert gpu0 == {
        'index': 0, 'uuid': 'GPU-11111111-2222-3333-4444-555555555501', 'name': 'NVIDIA H200',
        'pci_bus_id': '00000000:00:06.0', 'compute_cap': '9.0', 'compute_cap_major': 9, 'compute_cap_minor': 0,
        'memory_total_mib': 143771, 'persistence_mode': True, 'mig_mode_current': False,
        'mig_mode_pending': False, 'ecc_mode_current': True, 'ecc_errors_uncorrected_volatile': 0,
        'remapped_rows_correctable': 0, 'remapped_rows_uncorrectable': 0,
        'remapped_rows_pending': False, 'remapped_rows_failure': False, 'gpu_recovery_action': 'None',
        'fabric_state': 'Completed', 'fabric_status': 'Success'}
    assert facts['gpus'][1]['pci_bus_id'] == '00000000:00:07.0'
    links = facts['nvlink']
    assert links['available'] is True
    assert [g['links_active'] for g in links['gpus']] == [18, 18]
    assert links['gpus'][1]['uuid'] == 'GPU-11111111-2222-3333-4444-555555555502'
    assert links['links_active_min'] == 18
    assert links['topology'] == {'GPU0': {'GPU1': 'NV18'}, 'GPU1': {'GPU0': 'NV18'}}
    assert links['all_gpu_pairs_nvlink'] is True
    assert links['nvlinks_between_gpus_min'] == 18
    assert links['nvswitch_count'] == 0


def test_query_asks_explicit_fields_in_csv_without_header_or_units():
    runner = FakeSmi(capture_rows())
    collect(runner, nvlink=False)
    query = runner.calls[0]
    assert query[1] == '--query-gpu=' + ','.join(smi.QUERY_FIELD_NAMES)
    assert query[2] == '--format=csv,noheader,nounits'
    # the human table (plain nvidia-smi) is never asked for
    assert all(len(call) > 1 for call in runner.calls)


def test_unknown_fields_are_dropped_retried_and_reported():
    runner = FakeSmi(capture_rows(), unsupported=['fabric.state', 'remapped_rows.failure'])
    facts, warnings = collect(runner, nvlink=False)
    assert facts['unsupported_fields'] == ['remapped_rows.failure', 'fabric.state']
    queries = [c for c in runner.calls if c[1].startswith('--query-gpu=')]
    assert len(queries) == 3
    assert 'fabric.state' not in queries[-1][1] and 'remapped_rows.failure' not in queries[-1][1]
    assert 'fabric.status' in queries[-1][1]
    gpu = facts['gpus'][0]
    assert gpu['fabric_state'] is None and gpu['remapped_rows_failure'] is None
    assert gpu['fabric_status'] == 'Success'
    assert any('fabric.state' in w for w in warnings)


def test_a_required_field_the_driver_does_not_know_is_an_error():
    runner = FakeSmi(capture_rows(), unsupported=['memory.total'])
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(runner, nvlink=False)
    assert err.value.kind == 'unsupported_driver'
    assert 'memory.total' in err.value.message


@pytest.mark.parametrize('raw', ['N/A', '[N/A]', '[Not Supported]', 'Not Supported', ' [N/A] '])
def test_not_available_values_become_null(raw):
    rows = capture_rows()
    for field in ('persistence_mode', 'ecc.errors.uncorrected.volatile.total', 'fabric.state', 'compute_cap',
                  'mig.mode.pending'):
        rows[0][field] = raw
    facts, unused1 = collect(FakeSmi(rows), nvlink=False)
    gpu = facts['gpus'][0]
    assert gpu['persistence_mode'] is None
    assert gpu['ecc_errors_uncorrected_volatile'] is None
    assert gpu['fabric_state'] is None
    assert gpu['compute_cap'] is None and gpu['compute_cap_major'] is None
    assert gpu['mig_mode_pending'] is None
    assert facts['compute_caps'] == ['9.0']  # from GPU 1


def test_h200_mig_public_values():
    facts, unused1 = collect(FakeSmi(public_rows('h200-mig', count=1)), nvlink=False)
    gpu = facts['gpus'][0]
    assert gpu['mig_mode_current'] is True and gpu['mig_mode_pending'] is True
    assert gpu['remapped_rows_pending'] is None  # [N/A] on the MIG capture
    assert facts['driver_version'] == '590.48.01'


def test_b200_public_values_are_blackwell():
    facts, unused1 = collect(FakeSmi(public_rows('b200')), nvlink=False)
    assert facts['architecture'] == 'blackwell'
    assert facts['compute_caps'] == ['10.0']
    assert facts['gpus'][0]['compute_cap_major'] == 10
    assert facts['memory_total_mib'] == 8 * 183359
    assert len(set(g['uuid'] for g in facts['gpus'])) == 8


def test_mixed_families_are_reported_as_mixed_and_caps_sorted_numerically():
    rows = h200_rows(2) + public_rows('b200', count=1)
    rows[-1]['index'] = '2'
    rows.append(dict(rows[0], index='3', compute_cap='12.0'))
    facts, unused1 = collect(FakeSmi(rows), nvlink=False)
    assert facts['compute_caps'] == ['9.0', '10.0', '12.0']
    assert facts['architecture'] == 'mixed'


@pytest.mark.parametrize('cap,family', [('9.0', 'hopper'), ('10.0', 'blackwell'), ('10.3', 'blackwell'),
                                        ('12.0', 'blackwell'), ('8.9', 'ada'), ('8.0', 'ampere'),
                                        ('8.6', 'ampere'), ('7.0', 'unknown')])
def test_architecture_from_compute_capability(cap, family):
    unused0, major, minor = smi.split_cap(cap)
    assert smi.architecture_for(major, minor) == family


def test_unexpected_yes_no_value_is_a_parse_error():
    rows = capture_rows()
    rows[0]['persistence_mode'] = 'Sometimes'
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi(rows), nvlink=False)
    assert err.value.kind == 'parse' and 'persistence_mode' in err.value.message


@pytest.mark.parametrize('rc', [0, 18, 255])
def test_nvml_mismatch_is_matched_on_the_message_not_the_exit_code(rc):
    text = 'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 460.73\n'
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi([], failure=(rc, text)))
    exc = err.value
    assert exc.kind == 'nvml_mismatch'
    assert 'Driver/library version mismatch' in exc.message
    assert '460.73' in exc.message
    for advice in ('kernel module', 'unattended', 'reboot', 'hold'):
        assert advice in exc.message
    # the version nvidia-smi printed, for the preflight message
    assert exc.as_dict()['nvml_library_version'] == '460.73'


def test_nvml_mismatch_without_a_printed_library_version():
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi([], failure=(18, 'Failed to initialize NVML: Driver/library version mismatch\n')))
    assert err.value.as_dict()['nvml_library_version'] is None


def test_no_devices_found():
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi([], failure=(6, 'No devices were found\n')))
    assert err.value.kind == 'no_gpu'


def test_empty_answer_is_no_gpu():
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi([]))
    assert err.value.kind == 'no_gpu'


def test_driver_not_loaded():
    text = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n")
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi([], failure=(9, text)))
    assert err.value.kind == 'driver_not_loaded'
    assert 'modprobe nvidia' in err.value.message


def test_other_failure_keeps_the_output():
    with pytest.raises(smi.NvidiaSmiError) as err:
        collect(FakeSmi([], failure=(4, 'Insufficient Permissions\n')))
    assert err.value.kind == 'failed' and 'Insufficient Permissions' in err.value.message
    assert err.value.rc == 4


def test_wrong_column_count_is_a_parse_error():
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.parse_query_csv('0, NVIDIA H200\n', ['index', 'name', 'uuid'])
    assert err.value.kind == 'parse'


def test_header_line_is_skipped():
    rows = smi.parse_query_csv('index, name\n0, NVIDIA H200\n', ['index', 'name'])
    assert rows == [{'index': '0', 'name': 'NVIDIA H200'}]


def test_missing_cuda_version_is_a_warning_not_an_error():
    facts, warnings = collect(FakeSmi(capture_rows(), cuda=None), nvlink=False)
    assert facts['cuda_version'] is None
    assert any('CUDA version' in w for w in warnings)


def test_nvlink_and_topo_failures_are_warnings():
    facts, warnings = collect(FakeSmi(capture_rows()), lspci='/usr/bin/lspci')
    assert facts['nvlink']['available'] is False
    assert facts['nvlink']['topology'] == {}
    assert facts['nvlink']['nvswitch_count'] is None
    assert len(warnings) == 3


def test_no_lspci_means_unknown_nvswitch_count():
    runner = FakeSmi(capture_rows(), nvlink_text=capture_text('nvlink.txt'), topo_text=capture_text('topo.txt'))
    facts, unused1 = collect(runner, lspci=None)
    assert facts['nvlink']['nvswitch_count'] is None
    assert not any(c[0].endswith('lspci') for c in runner.calls)


def test_nvlink_status_with_inactive_links():
    # illustrative input in the shape of the real nvlink.txt: GPU 1 has its links down
    text = ('GPU 0: NVIDIA H200 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n'
            'GPU 1: NVIDIA H200 (UUID: GPU-b)\n\t Link 0: <inactive>\n\t Link 1: <inactive>\n')
    gpus = smi.parse_nvlink_status(text)
    assert gpus == [
        {'index': 0, 'uuid': 'GPU-a', 'links_active': 2, 'links_inactive': 0, 'link_speed_gbps': 26.562},
        {'index': 1, 'uuid': 'GPU-b', 'links_active': 0, 'links_inactive': 2, 'link_speed_gbps': None}]


def test_topo_matrix_with_nic_columns_and_pcie_pairs():
    # illustrative matrix: GPU1 reaches GPU0 over the SMP interconnect only, NIC columns are ignored
    text = ('\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n'
            'GPU0\t X \tSYS\tPIX\t0-31\t0\t\tN/A\n'
            'GPU1\tSYS\t X \tSYS\t32-63\t1\t\tN/A\n'
            'NIC0\tPIX\tSYS\t X \n\nLegend:\n\n  X    = Self\n')
    matrix = smi.parse_topo_matrix(text)
    assert matrix == {'GPU0': {'GPU1': 'SYS'}, 'GPU1': {'GPU0': 'SYS'}}
    assert smi.topo_summary(matrix) == (False, None)


def test_topo_summary_single_gpu_is_unknown():
    assert smi.topo_summary({'GPU0': {}}) == (None, None)


def test_topo_color_codes_are_stripped():
    text = capture_text('topo.txt').replace('NV18', '\x1b[32mNV18\x1b[0m')
    assert smi.parse_topo_matrix(text)['GPU0'] == {'GPU1': 'NV18'}


def test_nvswitch_count_from_lspci():
    # illustrative `lspci -d 10de:` of an HGX board (F1: 4 NVSwitch bridges next to 8 GPUs)
    text = ('18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n'
            '05:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)\n'
            '06:00.0 Bridge: NVIDIA Corporation Device 22a3 (rev a1)\n'
            '07:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)\n'
            '08:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)\n')
    assert smi.count_nvswitches(text) == 4
    assert smi.count_nvswitches('') == 0


def test_version_output():
    text = ('NVIDIA-SMI version  : 580.95.05\nNVML version        : 580.95\nDRIVER version      : 580.95.05\n'
            'CUDA Version        : 13.0\n')
    assert smi.parse_version(text) == {'driver_version': '580.95.05', 'cuda_version': '13.0',
                                       'nvml_version': '580.95'}


def test_kernel_module_version(tmp_path):
    path = tmp_path / 'version'
    path.write_text('NVRM version: NVIDIA UNIX x86_64 Kernel Module  460.56  Tue Feb 23 23:23:21 UTC 2021\n'
                    'GCC version:  gcc version 9.3.0\n')
    assert smi.kernel_module_version(str(path)) == '460.56'
    assert smi.kernel_module_version(str(tmp_path / 'absent')) is None


def test_subprocess_runner_uses_c_locale_and_reports_timeout(tmp_path):
    script = tmp_path / 'env-smi'
    script.write_text('#!/bin/sh\necho "LC_ALL=$LC_ALL LANG=$LANG"\n[ "$1" = sleep ] && sleep 30\nexit 0\n')
    os.chmod(str(script), 0o755)
    rc, out, _err = smi.subprocess_runner([str(script)], 10)
    assert rc == 0 and out.strip() == 'LC_ALL=C LANG=C'
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.subprocess_runner([str(script), 'sleep'], 1)
    assert err.value.kind == 'timeout' and 'did not answer within 1s' in err.value.message


def test_subprocess_runner_missing_binary(tmp_path):
    with pytest.raises(smi.NvidiaSmiError) as err:
        smi.subprocess_runner([str(tmp_path / 'nvidia-smi')], 5)
    assert err.value.kind == 'missing'


def test_collect_through_a_real_process_with_fallback(tmp_path):
    path = write_fake_smi(tmp_path, rows=capture_rows(), unsupported=['fabric.status'])
    facts, warnings = smi.collect(path, timeout=20)
    assert facts['gpu_count'] == 2
    assert facts['unsupported_fields'] == ['fabric.status']
    assert facts['gpus'][0]['fabric_status'] is None
    assert facts['nvlink']['links_active_min'] == 18
    assert warnings
