# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The lab's nvidia-smi stand-in prints what its profile holds, applies faults, and the module parses it."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import nvidia_smi as smi
from ansible_collections.inkling.fleet.plugins.module_utils import variant as vt
from inkling_test_helpers import PROFILES, STANDIN, capture_rows, capture_text, default_table, run_module


@pytest.fixture
def lab(tmp_path):
    """A lab configuration in tmp_path: conf dir with profile file and faults dir."""
    conf = tmp_path / 'etc-inkling-lab'
    (conf / 'faults').mkdir(parents=True)

    class Lab(object):
        env = {'INKLING_LAB_CONF_DIR': str(conf), 'INKLING_LAB_PROFILES_DIR': PROFILES}

        def profile(self, name):
            (conf / 'profile').write_text(name + '\n')

        def fault(self, name, params=None):
            (conf / 'faults' / name).write_text(json.dumps(params) if params else '')

        def run(self, *args):
            env = dict(os.environ)
            env.pop('INKLING_LAB_PROFILE', None)
            env.update(self.env)
            proc = subprocess.run([sys.executable, STANDIN] + list(args), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, timeout=30, check=False)
            return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

        def facts(self, tmp):
            rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': STANDIN, 'timeout': 20,
                                                        'lspci_path': '/nonexistent/lspci'},
                                    env=self.env, tmp_path=tmp)
            return rc, result

    result = Lab()
    result.profile('h200-8')
    return result


def load_profile(name):
    with open(os.path.join(PROFILES, name + '.json')) as handle:
        return json.load(handle)


def test_h200_8_query_prints_the_profile(lab):
    profile = load_profile('h200-8')
    rc, out, unused2 = lab.run('--query-gpu=index,uuid,pci.bus_id,memory.total', '--format=csv,noheader,nounits')
    assert rc == 0
    lines = out.splitlines()
    assert lines == ['%s, %s, %s, %s' % (g['index'], g['uuid'], g['pci.bus_id'], g['memory.total'])
                     for g in profile['gpus']]
    assert len(lines) == 8
    assert len(set(l.split(', ')[1] for l in lines)) == 8 and len(set(l.split(', ')[2] for l in lines)) == 8


def test_h200_8_matches_the_real_capture(lab):
    real = capture_rows()[0]
    rc, out, unused2 = lab.run(
        '--query-gpu=name,compute_cap,driver_version,memory.total,persistence_mode,fabric.state',
        '--format=csv,noheader,nounits')
    assert rc == 0
    expected = ', '.join([real['name'], real['compute_cap'], real['driver_version'], real['memory.total'],
                          real['persistence_mode'], real['fabric.state']])
    assert set(out.splitlines()) == {expected}
    unused0, version, unused2 = lab.run('--version')
    assert 'CUDA Version        : 13.0' in version and 'DRIVER version      : 580.159.04' in version


def test_header_and_units_like_the_real_csv(lab):
    lab.profile('h200-2')
    rc, out, unused2 = lab.run('--query-gpu=index,name,memory.total,memory.used', '--format=csv')
    assert rc == 0
    assert out.splitlines() == ['index, name, memory.total [MiB], memory.used [MiB]',
                                '0, NVIDIA H200, 143771 MiB, 0 MiB', '1, NVIDIA H200, 143771 MiB, 0 MiB']
    assert '143771 MiB, 0 MiB' in capture_text('query-gpu.csv')  # the same rendering as the capture


def test_list_and_topology(lab):
    unused0, listing, unused2 = lab.run('-L')
    assert listing.splitlines()[0] == 'GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555501)'
    unused0, topo, unused2 = lab.run('topo', '-m')
    matrix = smi.parse_topo_matrix(topo)
    assert len(matrix) == 8 and set(matrix['GPU3'].values()) == {'NV18'}
    unused0, nvlink, unused2 = lab.run('nvlink', '-s')
    assert [g['links_active'] for g in smi.parse_nvlink_status(nvlink)] == [18] * 8


def test_b200_8_profile(lab):
    lab.profile('b200-8')
    rc, out, unused2 = lab.run('--query-gpu=name,compute_cap,memory.total,driver_version', '--format=csv,noheader')
    assert rc == 0
    assert set(out.splitlines()) == {'NVIDIA B200, 10.0, 183359 MiB, 580.95.05'}
    assert len(out.splitlines()) == 8


def test_env_profile_overrides_the_file(lab):
    lab.env = dict(lab.env, INKLING_LAB_PROFILE='b200-8')
    unused0, out, unused2 = lab.run('--query-gpu=name', '--format=csv,noheader')
    assert out.splitlines()[0] == 'NVIDIA B200'


def test_missing_profile_is_a_clear_error(lab):
    lab.profile('nope-1')
    rc, unused1, err = lab.run('-L')
    assert rc == 2 and "profile 'nope-1' not found" in err


def test_unknown_and_unsupported_fields(lab):
    rc, out, unused2 = lab.run('--query-gpu=index,bogus.field', '--format=csv')
    assert rc == 2 and out.strip() == 'Field "bogus.field" is not a valid field to query.'
    lab.fault('unsupported-fields', {'fields': ['mig.mode.pending']})
    rc, out, unused2 = lab.run('--query-gpu=index,mig.mode.pending', '--format=csv')
    assert rc == 2 and out.strip() == 'Field "mig.mode.pending" is not a valid field to query.'


def test_gpu_filter(lab):
    unused0, out, unused2 = lab.run('-i', '3', '--query-gpu=index', '--format=csv,noheader')
    assert out.splitlines() == ['3']


def test_unsupported_invocation(lab):
    rc, unused1, err = lab.run('-q', '-x')
    assert rc == 2 and 'unsupported arguments' in err


def test_module_parses_the_h200_8_profile_and_selects_sm90(lab, tmp_path):
    rc, result = lab.facts(tmp_path)
    assert rc == 0, result
    facts = result['nvidia_gpu']
    assert facts['gpu_count'] == 8 and facts['memory_total_mib'] == 8 * 143771
    assert facts['driver_version'] == '580.159.04' and facts['cuda_version'] == '13.0'
    assert all(g['fabric_state'] == 'Completed' and g['fabric_status'] == 'Success' for g in facts['gpus'])
    assert facts['nvlink']['all_gpu_pairs_nvlink'] is True and facts['nvlink']['nvlinks_between_gpus_min'] == 18
    table, version = default_table()
    variant, unused1 = vt.select_variant(facts, 'thinkingmachines/Inkling-NVFP4', 8, table, schema_version=version)
    assert variant['name'] == 'sm90-patched'


def test_module_parses_the_b200_profile_and_selects_sm100(lab, tmp_path):
    lab.profile('b200-8')
    rc, result = lab.facts(tmp_path)
    assert rc == 0, result
    table, version = default_table()
    variant, unused1 = vt.select_variant(result['nvidia_gpu'], 'thinkingmachines/Inkling-NVFP4', 8, table,
                                         schema_version=version)
    assert variant['name'] == 'sm100'


def test_h100_profile_is_refused_on_memory(lab, tmp_path):
    lab.profile('h100-8')
    unused0, result = lab.facts(tmp_path)
    table, version = default_table()
    with pytest.raises(vt.VariantRefused) as err:
        vt.select_variant(result['nvidia_gpu'], 'thinkingmachines/Inkling-NVFP4', 8, table, schema_version=version)
    assert '652472 MiB' in err.value.reasons[0]


@pytest.mark.parametrize('fault,check', [
    ('mig-enabled', lambda f: f['gpus'][0]['mig_mode_current'] is True and f['gpus'][0]['mig_mode_pending'] is True
     and f['gpus'][1]['mig_mode_current'] is False),
    ('mig-pending', lambda f: f['gpus'][0]['mig_mode_pending'] is True and f['gpus'][0]['mig_mode_current'] is False),
    ('fabric-in-progress', lambda f: {(g['fabric_state'], g['fabric_status']) for g in f['gpus']}
     == {('In Progress', None)}),
    ('gpu-missing', lambda f: f['gpu_count'] == 7 and [g['index'] for g in f['gpus']] == list(range(7))),
    ('ecc-errors', lambda f: [g['ecc_errors_uncorrected_volatile'] for g in f['gpus']] == [0, 0, 0, 2, 0, 0, 0, 0]),
    ('persistence-off', lambda f: {g['persistence_mode'] for g in f['gpus']} == {False}),
    ('remapped-rows-pending', lambda f: [g['remapped_rows_pending'] for g in f['gpus']].count(True) == 1
     and f['gpus'][2]['remapped_rows_pending'] is True),
    ('old-driver', lambda f: f['driver_version'] == '535.183.01' and f['cuda_version'] == '12.2'),
    ('unsupported-fields', lambda f: f['unsupported_fields'] == ['remapped_rows.pending', 'remapped_rows.failure',
                                                                 'fabric.state', 'fabric.status']
     and f['gpus'][0]['fabric_state'] is None),
    ('nvlink-down', lambda f: f['nvlink']['links_active_min'] == 0 and f['nvlink']['all_gpu_pairs_nvlink'] is False),
])
def test_fault_overlays_reach_the_facts(lab, tmp_path, fault, check):
    lab.fault(fault)
    rc, result = lab.facts(tmp_path)
    assert rc == 0, result
    assert check(result['nvidia_gpu'])


def test_fault_parameters(lab, tmp_path):
    lab.fault('gpu-missing', {'gpus': [0, 1]})
    lab.fault('mig-enabled', {'gpus': [4]})
    unused0, result = lab.facts(tmp_path)
    facts = result['nvidia_gpu']
    assert [g['index'] for g in facts['gpus']] == [2, 3, 4, 5, 6, 7]
    assert [g['index'] for g in facts['gpus'] if g['mig_mode_current']] == [4]


@pytest.mark.parametrize('fault,kind', [('nvml-mismatch', 'nvml_mismatch'), ('no-gpu', 'no_gpu'),
                                        ('driver-not-loaded', 'driver_not_loaded')])
def test_failure_faults(lab, tmp_path, fault, kind):
    lab.fault(fault)
    rc, result = lab.facts(tmp_path)
    assert rc == 1 and result['error_kind'] == kind


def test_nvml_mismatch_text(lab):
    lab.fault('nvml-mismatch')
    rc, out, unused2 = lab.run('-L')
    assert rc == 18 and out.splitlines()[0] == 'Failed to initialize NVML: Driver/library version mismatch'


@pytest.mark.parametrize('name', ['h200-8', 'b200-8'])
def test_nvml_mismatch_prints_the_user_space_version_of_the_libraries_the_lab_installs(lab, tmp_path, name):
    """lab/gpu-host installs libcuda.so.<driver> of the profile: NVML's x.y must be that driver's."""
    lab.profile(name)
    driver = load_profile(name)['driver_version']
    lab.fault('nvml-mismatch')
    unused0, out, unused2 = lab.run('-L')
    printed = out.splitlines()[1].split(': ', 1)[1]
    assert printed == load_profile(name)['nvml_version']
    assert driver.startswith(printed + '.')
    unused0, result = lab.facts(tmp_path)
    assert result['nvml_library_version'] == printed


def test_nvml_mismatch_library_version_parameter(lab):
    lab.fault('nvml-mismatch', {'library_version': '580.173'})
    unused0, out, unused2 = lab.run('-L')
    assert out.splitlines()[1] == 'NVML library version: 580.173'


def test_hang_fault_hits_the_module_timeout(lab, tmp_path):
    lab.fault('hang', {'seconds': 30})
    unused0, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': STANDIN, 'timeout': 1}, env=lab.env,
                                 tmp_path=tmp_path)
    assert result['error_kind'] == 'timeout'


def test_files_of_other_lab_stand_ins_in_the_faults_dir_are_ignored(lab, tmp_path):
    # the GPU-host fixtures keep plain-text files there (e.g. fabricmanager-version, podman-version)
    lab.fault('mig-enabled')
    faults = lab.env['INKLING_LAB_CONF_DIR'] + '/faults/'
    with open(faults + 'fabricmanager-version', 'w') as handle:
        handle.write('575.57.08\n')
    with open(faults + 'no-nvswitch', 'w') as handle:
        handle.write('')
    rc, out, err = lab.run('--query-gpu=index,mig.mode.current', '--format=csv,noheader')
    assert rc == 0 and err == ''
    assert out.splitlines()[0] == '0, Enabled'
