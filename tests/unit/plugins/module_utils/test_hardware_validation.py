# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Regression tests from the real 2x H200 run (docs/hardware-validation.md).

The facts below were returned by inkling.fleet.nvidia_gpu_info on a real host
(playbooks/hardware_validation.yml, 2026-11-29; UUIDs replaced). What nvidia-smi printed on
that host (raw.txt, and the same host's capture in fixtures/nvidia-smi/h200-2gpu-driver580)
is replayed through the module's own collection code: it must give the recorded facts, and
the variant selection on those facts what the real run gave.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import nvidia_smi, variant
from inkling_test_helpers import FakeSmi, capture_rows, capture_text, default_table

RUN = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'hardware-validation',
                   'h200-x2-driver580-2026-11-29')


def _run():
    with open(os.path.join(RUN, 'hardware-validation-output.json')) as f:
        return json.load(f)['hosts']['localhost']


def _raw_section(title):
    with open(os.path.join(RUN, 'raw.txt')) as f:
        text = f.read()
    section = text.split('### ' + title + '\n', 1)[1]
    return section.split('\nrc=', 1)[0]


class ReplaySmi(FakeSmi):
    """nvidia-smi answering what it printed on the real host (raw.txt), the rest from its capture."""

    def __call__(self, argv, timeout):
        if argv[1:] == ['--version']:
            self.calls.append(list(argv))
            return 0, _raw_section('nvidia-smi --version') + '\n', ''
        return super(ReplaySmi, self).__call__(argv, timeout)


def _replayed_facts():
    csv = _raw_section('nvidia-smi --query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,'
                       'fabric.cliqueId,mig.mode.current,mig.mode.pending,remapped_rows.pending,'
                       'remapped_rows.failure,ecc.mode.current,ecc.errors.uncorrected.volatile.total,'
                       'persistence_mode,compute_cap,gpu_recovery_action --format=csv').splitlines()
    header = [h.strip() for h in csv[0].split(',')]
    rows = capture_rows()
    assert len(rows) == len(csv) - 1 == 2
    for row, line in zip(rows, csv[1:]):
        row.update(zip(header, [v.strip() for v in line.split(',')]))
    # lspci was not installed there (rc=1 in raw.txt); nvlink -s is in raw.txt only as its first lines.
    smi = ReplaySmi(rows, nvlink_text=capture_text('nvlink.txt'), topo_text=_raw_section('nvidia-smi topo -m'),
                    lspci_text=None)
    return nvidia_smi.collect('nvidia-smi', runner=smi, lspci='lspci')


# Query fields the module asks for since that run (the recorded facts predate them).
NEWER_FIELDS = ('gpu_recovery_action', 'remapped_rows_correctable', 'remapped_rows_uncorrectable')


def test_replayed_capture_gives_the_recorded_facts():
    facts, warnings = _replayed_facts()
    recorded = _run()['nvidia_gpu_info']['nvidia_gpu']
    older = dict(facts, gpus=[dict((k, v) for k, v in g.items() if k not in NEWER_FIELDS) for g in facts['gpus']])
    assert older == recorded
    assert warnings == ['`lspci -d 10de:` failed (rc=1); nvswitch_count is null']


def test_replayed_recovery_action_is_what_the_real_driver_printed():
    """gpu_recovery_action was queried by hand on that host (raw.txt): None on both GPUs."""
    facts, unused = _replayed_facts()
    assert [g['gpu_recovery_action'] for g in facts['gpus']] == ['None', 'None']
    assert [g['pci_bus_id'] for g in facts['gpus']] == ['00000000:00:06.0', '00000000:00:07.0']


def test_selection_on_replayed_facts_matches_the_real_run():
    """Parse + select, offline, end to end: the variant and the refusal the real run recorded."""
    real = _run()
    facts, dummy = _replayed_facts()
    table, schema = default_table()
    chosen, reasons = variant.select_variant(facts, real['cases'][0]['model'], real['cases'][0]['tensor_parallel_size'],
                                             table, host='localhost', schema_version=schema)
    assert chosen['name'] == real['cases'][0]['variant']['name']
    assert reasons == real['cases'][0]['reasons']
    refused = real['cases'][1]
    with pytest.raises(variant.VariantRefused) as exc:
        variant.select_variant(facts, refused['model'], refused['tensor_parallel_size'], table, host='localhost',
                               schema_version=schema)
    assert refused['outcome'] == 'refused'
    # What was found is as recorded; the remedies were reworded since (issue 37: the gpu.count remedy
    # suggests only a tensor parallel size the table offers for these GPUs, or says none does).
    found = [r.split(' Remedy: ')[0] for r in exc.value.reasons]
    assert found == [r.split(' Remedy: ')[0] for r in refused['reasons']]
    assert str(exc.value).startswith(refused['msg'].split(' Remedy: ')[0])
    assert 'no setting of inkling_tensor_parallel_size fixes it' in exc.value.reasons[0]


def test_real_facts_are_a_2x_h200_hopper_host():
    facts = _run()['nvidia_gpu_info']['nvidia_gpu']
    assert facts['gpu_count'] == 2
    assert facts['architecture'] == 'hopper'
    assert facts['compute_caps'] == ['9.0']
    assert facts['driver_version'] == '580.159.04'
    assert facts['memory_total_mib'] == 2 * 143771
    for gpu in facts['gpus']:
        assert gpu['fabric_state'] == 'Completed' and gpu['fabric_status'] == 'Success'
        assert gpu['mig_mode_current'] is False and gpu['mig_mode_pending'] is False
        assert gpu['persistence_mode'] is True
        assert gpu['remapped_rows_pending'] is False


def test_selection_on_real_facts_matches_the_real_run():
    real = _run()
    facts = real['nvidia_gpu_info']['nvidia_gpu']
    table, schema = default_table()
    chosen, reasons = variant.select_variant(facts, 'thinkingmachines/Inkling-Small-NVFP4', 2, table,
                                             host='localhost', schema_version=schema)
    assert chosen['name'] == real['cases'][0]['variant']['name'] == 'sm90-small-tp2'
    assert reasons == real['cases'][0]['reasons']

    with pytest.raises(variant.VariantRefused) as exc:
        variant.select_variant(facts, 'thinkingmachines/Inkling-NVFP4', 8, table, host='localhost',
                               schema_version=schema)
    refused = real['cases'][1]
    assert refused['outcome'] == 'refused'
    assert '2 GPU(s); tensor parallel size 8 needs 8' in str(exc.value)
    assert '666624 MiB' in str(exc.value)
    assert len(refused['reasons']) == 2


def test_real_fabric_and_health_csv_parses():
    text = _raw_section('nvidia-smi --query-gpu=index,fabric.state,fabric.status,fabric.clusterUuid,'
                        'fabric.cliqueId,mig.mode.current,mig.mode.pending,remapped_rows.pending,'
                        'remapped_rows.failure,ecc.mode.current,ecc.errors.uncorrected.volatile.total,'
                        'persistence_mode,compute_cap,gpu_recovery_action --format=csv')
    fields = ['index', 'fabric.state', 'fabric.status', 'fabric.clusterUuid', 'fabric.cliqueId',
              'mig.mode.current', 'mig.mode.pending', 'remapped_rows.pending', 'remapped_rows.failure',
              'ecc.mode.current', 'ecc.errors.uncorrected.volatile.total', 'persistence_mode', 'compute_cap',
              'gpu_recovery_action']
    rows = nvidia_smi.parse_query_csv(text, fields)
    assert len(rows) == 2
    assert [r['fabric.state'] for r in rows] == ['Completed', 'Completed']
    assert nvidia_smi.to_bool(rows[0]['mig.mode.current']) is False
    assert nvidia_smi.to_bool(rows[0]['remapped_rows.pending']) is False
    assert nvidia_smi.split_cap(rows[1]['compute_cap'])[1:] == (9, 0)


def _preflight_report(name):
    with open(os.path.join(RUN, 'preflight', 'report-%s.json' % name)) as f:
        return json.load(f)


def test_real_preflight_report_says_exactly_no_podman_and_no_cdi_spec():
    """The bare 2x H200 host, preflighted for Inkling-Small-NVFP4 at TP 2."""
    report = _preflight_report('small-tp2')
    assert report['ok'] is False
    assert [f['check'] for f in report['failures']] == ['podman.version', 'cdi.spec']
    assert 'podman is not installed' in report['failures'][0]['message']
    assert 'no CDI spec' in report['failures'][1]['message']
    assert report['variant']['name'] == 'sm90-small-tp2'


def test_preflight_checks_on_real_facts_give_the_real_failures():
    """Re-evaluating the facts gathered on the real host gives the same failures offline."""
    from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks
    report = _preflight_report('small-tp2')
    facts = report['facts']
    again = preflight_checks.evaluate('localhost', gpu=facts['gpu'], gpu_error=facts['gpu_error'],
                                      host_facts=facts['host'], variant=report['variant'],
                                      tensor_parallel_size=2)
    assert [f['check'] for f in again['failures']] == ['podman.version', 'cdi.spec']


def test_real_preflight_default_tp8_is_refused_on_two_gpus():
    report = _preflight_report('default-tp8')
    checks = [f['check'] for f in report['failures']]
    assert checks[:2] == ['variant', 'gpu.count']
    assert 'expected 8 GPUs for tensor_parallel_size=8, found 2' in report['failures'][1]['message']


# --------------------------------------------------------------------------
# 1x H200, driver 580.159.04, 2026-12-01: the GPU health checks of issue 18
# (playbooks/hardware_checks.yml; docs/hardware-validation.md)
# --------------------------------------------------------------------------

RUN_X1 = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'hardware-validation',
                      'h200-x1-driver580-2026-12-01')


def _x1_raw(title):
    with open(os.path.join(RUN_X1, 'raw.txt')) as f:
        text = f.read()
    return text.split('### ' + title + '\n', 1)[1].split('\nrc=', 1)[0]


def _x1_output():
    with open(os.path.join(RUN_X1, 'hardware-checks-output.json')) as f:
        return json.load(f)


def test_x1_recovery_action_and_remap_fields_replayed():
    """The explicit query printed there, replayed through the module's parser: the facts the run recorded."""
    lines = _x1_raw('nvidia-smi --query-gpu=index,pci.bus_id,gpu_recovery_action,remapped_rows.correctable,'
                    'remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure,'
                    'ecc.errors.uncorrected.volatile.total,fabric.state,fabric.status --format=csv').splitlines()
    header = [h.strip() for h in lines[0].split(',')]
    rows = [dict(zip(header, [v.strip() for v in line.split(',')])) for line in lines[1:]]
    gpu = nvidia_smi.normalise_gpu(dict(capture_rows()[0], **rows[0]))
    recorded = _x1_output()['nvidia_gpu']['gpus'][0]
    for key in ('pci_bus_id', 'gpu_recovery_action', 'remapped_rows_correctable', 'remapped_rows_uncorrectable',
                'remapped_rows_pending', 'remapped_rows_failure', 'fabric_state', 'fabric_status'):
        assert gpu[key] == recorded[key], key
    assert (gpu['gpu_recovery_action'], gpu['fabric_state']) == ('None', None)


def test_x1_wildcard_query_is_refused_by_that_driver():
    """`remapped_rows.*` is no query field on 580.159.04: the module asks for the fields by name."""
    assert _x1_raw('nvidia-smi --query-gpu=pci.bus_id,gpu_recovery_action,remapped_rows.* --format=csv').strip() == \
        'Field "remapped_rows.*" is not a valid field to query.'
    assert 'remapped_rows.correctable' in nvidia_smi.QUERY_FIELD_NAMES


def test_x1_real_dmesg_nvrm_lines_are_no_xid_events():
    from ansible_collections.inkling.fleet.plugins.module_utils import gpu_health
    text = _x1_raw('dmesg | grep -c NVRM; dmesg | grep -i -E "NVRM|xid" | tail -n 15')
    assert text.splitlines()[0] == '3'
    assert gpu_health.parse_kernel_log(text) == []
    out = _x1_output()
    assert out['kernel_log'] == {'error': None, 'events': [], 'nvrm_lines': 3, 'source': 'dmesg'}


def test_x1_recorded_checks_and_recheck():
    out = _x1_output()
    checks = dict((c['check'], c) for c in out['preflight'])
    assert checks['gpu.recovery_action']['message'] == 'GPU recovery action None on 1 GPUs'
    assert checks['gpu.xid']['message'] == 'no Xid event since boot that means a bad GPU (kernel log: dmesg)'
    assert checks['host.selinux']['message'] == 'SELinux disabled'
    assert 'fabric.nvlink5' not in checks and 'cdi.version' not in checks  # Hopper; no podman there
    assert out['recheck']['ok'] and out['recheck']['failures'] == []
    assert out['nvlink5']['kernel_modules'] == ['nvidia', 'nvidia_uvm']


def test_x1_torch_arch_flags_without_a_gpu():
    with open(os.path.join(RUN_X1, 'torch.txt')) as f:
        text = f.read()
    visible, hidden = [json.loads(line) for line in text.splitlines() if line.startswith('{')]
    assert visible['arch_flags'] == hidden['arch_flags'] == 'sm_75 sm_80 sm_86 sm_90 sm_100 sm_120'
    assert visible['get_arch_list'] == hidden['arch_flags'].split() and hidden['get_arch_list'] == []
    assert (hidden['torch'], hidden['cuda'], hidden['is_available']) == ('2.11.0+cu130', '13.0', False)


# --------------------------------------------------------------------------
# 1x H100 80GB, driver 580.159.04, 2026-12-07: the variant table as collection data
# (data/variants.yml, filled in by the inkling_variant action; docs/hardware-validation.md)
# --------------------------------------------------------------------------

RUN_H100 = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'hardware-validation',
                        'h100-x1-driver580-2026-12-07-variant-table')


def renamed(text):
    """Recorded text with the deployment variables under their release 0.2.0 names."""
    for old, new in (('preflight_tensor_parallel_size', 'inkling_tensor_parallel_size'),
                     ('preflight_variant_overrides', 'inkling_variant_overrides')):
        text = text.replace(old, new)
    return text


def _h100(name):
    with open(os.path.join(RUN_H100, name)) as f:
        return json.load(f)


def test_h100_selection_from_the_shipped_table_gives_what_the_real_action_gave():
    # The real run's tasks passed no table: the action plugin read data/variants.yml. The same
    # facts, selected here from the table file directly, give the same reasons.
    report = _h100(os.path.join('preflight', 'localhost.json'))
    gpu = report['facts']['gpu']
    assert gpu['gpu_count'] == 1 and gpu['compute_caps'] == ['9.0'] and gpu['gpus'][0]['memory_total_mib'] == 81559
    table, version = default_table()
    recorded = {c['name']: c for c in _h100('hardware-validation-output.json')['hosts']['localhost']['cases']}
    for name in ('fits', 'refused'):
        case = recorded[name]
        assert case['outcome'] == 'refused'
        with pytest.raises(variant.VariantRefused) as exc:
            variant.select_variant(gpu, case['model'], case['tensor_parallel_size'], table, host='localhost',
                                   schema_version=version)
        # recorded before the deployment variables were renamed (release 0.2.0): the same words, the old name
        assert exc.value.reasons == [renamed(r) for r in case['reasons']]
    assert [f['check'] for f in report['failures']] == ['podman.version', 'cdi.spec', 'host.disk', 'variant']
