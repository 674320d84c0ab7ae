# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""gpu_health: Xid events from public kernel log captures (tests/unit/fixtures/kernel-log, sources in its
README), the recovery action (real H200 capture: None), NVLink5 prerequisites and the re-check before a drain."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import gpu_health as gh
from inkling_test_helpers import capture_rows, facts_from_rows, public_rows

LOGS = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'kernel-log')


def log(name):
    with open(os.path.join(LOGS, name)) as handle:
        return handle.read()


def gpu_with_bus_ids(*bus_ids, **over):
    """Facts of the real H200 capture, one GPU per bus id (the capture's own are 00:06.0 and 00:07.0)."""
    rows = []
    template = capture_rows()[0]
    for index, bus in enumerate(bus_ids):
        row = dict(template, index=str(index), uuid='GPU-11111111-2222-3333-4444-5555555555%02d' % index)
        row['pci.bus_id'] = bus
        row.update(over)
        rows.append(row)
    return facts_from_rows(rows)


def failures(checks):
    return [c for c in checks if not c['ok']]


# --- parsing ----------------------------------------------------------------------------------------

def test_xid48_in_syslog_form_keeps_code_pci_and_monotonic_time():
    events = gh.parse_kernel_log(log('xid48-gpu-operator-1146.txt'))
    assert [(e['code'], e['pci'], e['time_s'], e['count']) for e in events] == [(48, '0000:07:00', 240314.528856, 1)]
    assert 'An uncorrectable double bit error (DBE)' in events[0]['detail']


def test_xid79_with_its_fallen_off_line_is_one_event_with_the_uuid_the_driver_printed():
    events = gh.parse_kernel_log(log('xid79-open-gpu-kernel-modules-1151.txt'))
    assert len(events) == 1
    event = events[0]
    assert (event['code'], event['pci'], event['count'], event['time_s']) == (79, '0000:2b:00', 1, None)
    assert event['uuid'] == 'GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae'
    assert 'Xid (PCI:0000:2b:00): 79' in event['text']


def test_xid79_gist_form():
    events = gh.parse_kernel_log(log('xid79-kenorb-gist.txt'))
    assert [(e['code'], e['pci'], e['count'], e['uuid']) for e in events] == [
        (79, '0000:65:00', 1, 'GPU-cd57429b-a4d9-917d-72d6-1d9b6c4f6a3a')]


def test_fallen_off_the_bus_without_an_xid_line_counts_as_79():
    events = gh.parse_kernel_log(log('fallen-off-no-xid-nvsentinel-155.txt'))
    assert [(e['code'], e['pci'], e['time_s']) for e in events] == [(79, '0000:b3:00', 1843.308145)]


def test_old_driver_form_without_pci_prefix():
    events = gh.parse_kernel_log(log('xid3-old-driver-pastebin.txt'))
    assert [(e['code'], e['pci']) for e in events] == [(79, '0000:01:00'), (3, '0000:01:00')]


def test_nvsentinel_shapes_other_domains_and_the_minimal_form():
    events = gh.parse_kernel_log(log('xid-nvsentinel-parser-test.txt'))
    expected = [(13, '0000:b5:00'), (74, '0003:00:00'), (46, '0000:3f:00'), (154, '0008:01:00')]
    assert [(e['code'], e['pci']) for e in events] == expected
    assert gh.recovery_target(events[3]['detail']) == 'GPU Reset Required'


def test_repeated_xids_are_counted_not_repeated():
    line = log('xid63-ml-engineering.txt').strip()
    events = gh.parse_kernel_log('\n'.join([line] * 3))
    assert [(e['code'], e['count']) for e in events] == [(63, 3)]


def test_pci_keys_match_nvidia_smi_bus_ids():
    assert gh.pci_key('00000000:2B:00.0') == gh.pci_key('0000:2b:00') == (0, 0x2b, 0)
    assert gh.pci_key('00000008:01:00.0') == (8, 1, 0)
    assert gh.pci_key('nonsense') is None


# --- the gpu.xid check ------------------------------------------------------------------------------

def test_xid79_names_the_gpu_by_index_and_bus_id():
    gpu = gpu_with_bus_ids('00000000:18:00.0', '00000000:2B:00.0')
    checks = gh.check_xid(gh.parse_kernel_log(log('xid79-open-gpu-kernel-modules-1151.txt')), gpu)
    (bad,) = failures(checks)
    assert bad['check'] == 'gpu.xid' and bad['level'] == 'error'
    assert bad['message'] == 'Xid 79 on GPU 1 (PCI 00000000:2B:00.0) since boot: GPU has fallen off the bus'
    assert (bad['gpu_index'], bad['pci'], bad['xid']) == (1, '0000:2b:00', 79)
    assert bad['remedy'].startswith('reboot (power-cycle) the host')


def test_a_gpu_that_fell_off_is_named_by_bus_id_and_uuid_when_nvidia_smi_no_longer_lists_it():
    gpu = gpu_with_bus_ids('00000000:18:00.0')
    (bad,) = failures(gh.check_xid(gh.parse_kernel_log(log('xid79-open-gpu-kernel-modules-1151.txt')), gpu))
    assert bad['message'].startswith('Xid 79 on GPU at PCI 0000:2b:00 GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae '
                                     '(not listed by nvidia-smi now)')
    assert bad['gpu_index'] is None


def test_xid48_time_and_remedy_with_the_gpu_index():
    gpu = gpu_with_bus_ids('00000000:07:00.0')
    (bad,) = failures(gh.check_xid(gh.parse_kernel_log(log('xid48-gpu-operator-1146.txt')), gpu))
    assert bad['message'] == ('Xid 48 on GPU 0 (PCI 00000000:07:00.0) 240315 s after boot: double-bit ECC error '
                              '(DBE) in GPU memory')
    assert '`nvidia-smi -r -i 0`' in bad['remedy'] and 'RMA' in bad['remedy']
    assert 'preflight_xid_since_s' in bad['remedy']


def test_application_xids_do_not_fail_a_host():
    gpu = gpu_with_bus_ids('00000000:DC:00.0', '00000000:ED:00.0')
    checks = gh.check_xid(gh.parse_kernel_log(log('xid45-open-gpu-kernel-modules-1150.txt')), gpu,
                          source='dmesg')
    assert failures(checks) == []
    assert checks[0]['message'] == 'no Xid event since boot that means a bad GPU (kernel log: dmesg)'


def test_nvsentinel_lines_give_nvlink_and_recovery_findings_not_the_application_ones():
    events = gh.parse_kernel_log(log('xid-nvsentinel-parser-test.txt'))
    found = failures(gh.check_xid(events, None))
    assert [(c['xid'], c['pci']) for c in found] == [(74, '0003:00:00'), (154, '0008:01:00')]
    assert found[1]['message'] == ('Xid 154 on GPU at PCI 0008:01:00 (index unknown: no GPU facts) since boot: '
                                   'GPU recovery action changed to GPU Reset Required')
    assert found[1]['remedy'].startswith('stop the GPU processes and reset the GPU')


def test_xid154_is_resolved_when_the_gpu_reports_no_recovery_action_now():
    events = gh.parse_kernel_log(log('xid-nvsentinel-parser-test.txt'))
    gpu = gpu_with_bus_ids('00000008:01:00.0')
    assert gpu['gpus'][0]['gpu_recovery_action'] == 'None'
    assert [c['xid'] for c in failures(gh.check_xid(events, gpu))] == [74]


def test_xid_since_and_ignore():
    gpu = gpu_with_bus_ids('00000000:07:00.0')
    events = gh.parse_kernel_log(log('xid48-gpu-operator-1146.txt'))
    assert failures(gh.check_xid(events, gpu, since_s=240400)) == []
    assert failures(gh.check_xid(events, gpu, since_s=240000)) != []
    assert failures(gh.check_xid(events, gpu, ignore=[48])) == []


def test_no_kernel_log_is_reported_as_skipped():
    (check,) = gh.check_xid([], None, error='journalctl: not installed; dmesg: not installed')
    assert check['ok'] and check['skipped']
    assert check['message'] == 'Xid events not checked: journalctl: not installed; dmesg: not installed'


# --- recovery action ---------------------------------------------------------------------------------

def test_recovery_action_none_on_the_real_h200():
    facts = facts_from_rows(capture_rows())
    (check,) = gh.check_recovery_action(facts)
    assert check['ok'] and check['message'] == 'GPU recovery action None on 2 GPUs'


@pytest.mark.parametrize('action,remedy', [
    ('Reset', 'stop the GPU processes and reset the GPU (`nvidia-smi -r -i 1`)'),
    ('Reboot', 'reboot the host'),
    ('Drain P2P', 'stop every GPU process on the host so that peer-to-peer'),
    ('Drain and Reset', 'stop every GPU process on the host (P2P traffic must drain), then reset the GPU'),
])
def test_recovery_action_names_gpu_bus_id_and_remedy(action, remedy):
    rows = capture_rows()
    rows[1]['gpu_recovery_action'] = action
    (check,) = gh.check_recovery_action(facts_from_rows(rows))
    assert not check['ok'] and check['level'] == 'error'
    assert check['message'] == ('the driver asks for a recovery action: GPU 1 (PCI 00000000:00:07.0): %s; the GPU '
                                'cannot serve until it is done' % action)
    assert check['remedy'].startswith(remedy)


def test_recovery_action_unknown_to_an_older_driver_is_skipped():
    facts = facts_from_rows(capture_rows(), unsupported=['gpu_recovery_action'])
    assert facts['unsupported_fields'] == ['gpu_recovery_action']
    (check,) = gh.check_recovery_action(facts)
    assert check['ok'] and check['skipped']


# --- NVLink5 -------------------------------------------------------------------------------------------

def b200(name=None):
    rows = public_rows('b200')
    for row in rows:
        row['name'] = name or row['name']
    return facts_from_rows(rows)


def nv5_facts(modules=('ib_umad', 'ib_core', 'mlx5_ib'), installed=True, running=True, fm_active=True, switches=2):
    return {'nvswitch_count': switches,
            'fabricmanager': {'installed': True, 'active': fm_active, 'state': 'active' if fm_active else 'inactive'},
            'nvlink5': {'kernel_modules': list(modules) if modules is not None else None,
                        'nvlsm': {'installed': installed, 'running': running}}}


def test_nvlink5_applies_to_b200_hgx_not_to_hopper():
    assert gh.nvlink5_system(b200(), 2) == 'hgx'
    assert gh.nvlink5_system(b200(), 0) == 'hgx'  # fabric state reported: this host's fabric
    assert gh.nvlink5_system(facts_from_rows(capture_rows()), 4) is None
    assert gh.check_nvlink5(facts_from_rows(capture_rows()), nv5_facts()) == []


def test_nvlink5_healthy():
    (check,) = gh.check_nvlink5(b200(), nv5_facts())
    assert check['ok'] and check['message'] == 'NVLink5 HGX board: ib_umad loaded, nvlsm running'


def test_nvlink5_without_ib_umad_and_nvlsm_says_what_to_install():
    (check,) = gh.check_nvlink5(b200(), nv5_facts(modules=['mlx5_core'], installed=False, running=False,
                                                  fm_active=False))
    assert not check['ok']
    assert check['message'] == (
        'NVLink5 HGX board: kernel module ib_umad not loaded (no /dev/infiniband/umad* for the NVSwitch management); '
        'NVLink Subnet Manager (nvlsm) not installed; the fabric manager cannot manage the NVSwitches, CUDA fails '
        'with error 802 (system not yet initialized)')
    assert '`modprobe ib_umad`' in check['remedy'] and 'nvlsm package' in check['remedy']
    assert 'systemctl restart nvidia-fabricmanager' in check['remedy']


def test_nvlink5_nvlsm_stopped_while_fabric_manager_runs():
    (check,) = gh.check_nvlink5(b200(), nv5_facts(running=False))
    assert not check['ok'] and 'nvlsm not running although nvidia-fabricmanager is active' in check['message']


def test_gb200_compute_tray_leaves_the_fabric_to_the_switch_trays():
    gpu = b200('NVIDIA GB200')
    assert gh.nvlink5_system(gpu, 0) == 'rack'
    (check,) = gh.check_nvlink5(gpu, nv5_facts(modules=[], installed=False))
    assert check['ok'] and 'NVLink switch trays' in check['message']


def test_fabric_manager_remedy_on_nvlink5_is_not_only_start_it():
    assert gh.nvlink5_fabric_remedy(facts_from_rows(capture_rows()), nv5_facts()) is None
    assert 'ib_umad' in gh.nvlink5_fabric_remedy(b200(), nv5_facts(modules=['mlx5_core']))
    # not probed: it cannot tell, so it names what the board needs
    assert 'ib_umad loaded and NVLSM installed (not probed' in gh.nvlink5_fabric_remedy(b200(), {'nvswitch_count': 2})


def b200_fabric_manager_died(**nv5):
    """A B200 HGX host whose fabric manager stopped (nvlsm, started by its start script, stopped with it) and
    whose GPUs lost their fabric registration."""
    gpu = b200()
    for g in gpu['gpus']:
        g['fabric_state'], g['fabric_status'] = 'Not Started', 'N/A'
    facts = nv5_facts(fm_active=False, running=False, **nv5)
    facts['fabricmanager'].update(state='failed', version=gpu['driver_version'])
    facts.update(kernel_module_version=gpu['driver_version'], userspace_driver_versions=[gpu['driver_version']],
                 kernel_log={'source': 'dmesg', 'events': [], 'error': None})
    return gpu, facts


def test_a_fabric_manager_that_died_is_restarted_not_blamed_on_ib_umad_or_nvlsm():
    """Both ib_umad and NVLSM are present: no remedy names them; fabric.nvlink5 passes."""
    gpu, facts = b200_fabric_manager_died()
    report = gh.recheck('b200-01', gpu, None, facts)
    failed = dict((c['check'], c) for c in report['failures'])
    assert sorted(failed) == ['fabric.manager', 'fabric.state']
    assert [c['ok'] for c in report['checks'] if c['check'] == 'fabric.nvlink5'] == [True]
    for check in failed.values():
        assert 'ib_umad' not in check['remedy'] and 'nvlsm' not in check['remedy'].lower()
        assert 'systemctl enable --now nvidia-fabricmanager' in check['remedy']
        assert 'journalctl -u nvidia-fabricmanager' in check['remedy']
    assert failed['fabric.manager']['found'] == 'nvidia-fabricmanager failed'


@pytest.mark.parametrize('nv5,named,not_named', [
    ({'modules': ['mlx5_core']}, ['`modprobe ib_umad`'], ['nvlsm']),
    ({'installed': False}, ['NVLSM installed', 'nvlsm package'], ['ib_umad']),
    ({'modules': ['mlx5_core'], 'installed': False}, ['`modprobe ib_umad`', 'nvlsm package'], []),
    ({'modules': None}, ['ib_umad loaded (loaded kernel modules unknown'], ['nvlsm']),
])
def test_the_fabric_manager_remedy_names_only_what_is_missing(nv5, named, not_named):
    gpu, facts = b200_fabric_manager_died(**nv5)
    report = gh.recheck('b200-01', gpu, None, facts)
    failed = dict((c['check'], c) for c in report['failures'])
    for check in ('fabric.manager', 'fabric.state'):
        remedy = failed[check]['remedy']
        assert all(word in remedy for word in named), remedy
        assert not any(word in remedy.lower() for word in not_named), remedy
        assert 'journalctl -u nvidia-fabricmanager' in remedy


# --- the re-check before a drain ------------------------------------------------------------------------

def host(**over):
    facts = {'kernel_module_version': '580.159.04', 'userspace_driver_versions': ['580.159.04'],
             'fabricmanager': {'installed': True, 'active': True, 'state': 'active', 'version': '580.159.04'},
             'nvswitch_count': 4, 'kernel_log': {'source': 'dmesg', 'events': [], 'error': None}}
    facts.update(over)
    return facts


def h200_8(**over):
    rows = []
    for index in range(8):
        row = dict(capture_rows()[0], index=str(index), uuid='GPU-%02d' % index)
        row['pci.bus_id'] = '00000000:%02X:00.0' % (0x18 + index)
        row.update(over)
        rows.append(row)
    return facts_from_rows(rows)


def test_recheck_healthy_host_checks_exactly_the_fast_set():
    report = gh.recheck('h1', h200_8(), None, host())
    assert report['ok'] and report['failures'] == []
    assert sorted(set(c['check'] for c in report['checks'])) == sorted(
        ['driver.kernel_module', 'driver.nvml', 'fabric.manager', 'fabric.manager_version', 'fabric.state',
         'gpu.count', 'gpu.ecc', 'gpu.mig', 'gpu.recovery_action', 'gpu.row_remapping', 'gpu.xid'])


def test_recheck_fabric_manager_died_after_preflight():
    report = gh.recheck('lab-h200-01', h200_8(), None, host(fabricmanager={
        'installed': True, 'active': False, 'state': 'inactive', 'version': '580.159.04'}))
    assert not report['ok']
    assert [c['check'] for c in report['failures']] == ['fabric.manager']
    summary = gh.recheck_summary(report)
    assert summary.splitlines() == [
        'lab-h200-01: re-check before the drain failed (1 problem); the host is not drained or stopped:',
        '- [fabric.manager] nvidia-fabricmanager is inactive on an NVSwitch system (4 NVSwitch devices); '
        'install/start FM matching driver 580.159.04; remedy: systemctl enable --now nvidia-fabricmanager '
        '(preflight_fix: true starts it); check its journal']


def test_recheck_new_xid_ecc_and_pending_remap():
    gpu = h200_8()
    gpu['gpus'][7]['ecc_errors_uncorrected_volatile'] = 2
    gpu['gpus'][7]['remapped_rows_pending'] = True
    events = gh.parse_kernel_log(log('xid63-ml-engineering.txt').replace('0000:10:1c', '0000:1f:00'))
    report = gh.recheck('h1', gpu, None, host(kernel_log={'source': 'dmesg', 'events': events}))
    assert [c['check'] for c in report['failures']] == ['gpu.ecc', 'gpu.row_remapping', 'gpu.xid']
    assert report['failures'][2]['message'].startswith('Xid 63 on GPU 7 (PCI 00000000:1F:00.0) since boot')


def test_recheck_nvml_mismatch_is_one_driver_finding():
    report = gh.recheck('h1', None, 'Failed to initialize NVML: Driver/library version mismatch\n'
                                    'NVML library version: 580.159', host(kernel_module_version='580.126.09'))
    assert [c['check'] for c in report['failures']] == ['driver.nvml']
    assert 'reboot required' in report['failures'][0]['message']


def test_recheck_ignores_persistence_and_host_checks():
    gpu = h200_8(persistence_mode='Disabled')
    assert gh.recheck('h1', gpu, None, host())['ok']
