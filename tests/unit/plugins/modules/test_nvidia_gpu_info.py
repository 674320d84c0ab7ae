# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The nvidia_gpu_info module run as Ansible runs it, against fake nvidia-smi executables."""

from inkling_test_helpers import capture_rows, run_module, write_fake_smi


def test_reads_the_real_capture_through_a_fake_binary(tmp_path):
    path = write_fake_smi(tmp_path, rows=capture_rows())
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': path, 'lspci_path': '/nonexistent/lspci'},
                            tmp_path=tmp_path)
    assert rc == 0, result
    assert result['changed'] is False
    facts = result['nvidia_gpu']
    assert facts['gpu_count'] == 2 and facts['compute_caps'] == ['9.0']
    assert facts['gpus'][1]['uuid'] == 'GPU-11111111-2222-3333-4444-555555555502'
    assert facts['nvlink']['nvlinks_between_gpus_min'] == 18
    assert facts['nvlink']['nvswitch_count'] is None


def test_check_mode_still_reads(tmp_path):
    path = write_fake_smi(tmp_path, rows=capture_rows())
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': path, 'nvlink': False}, tmp_path=tmp_path,
                            check_mode=True)
    assert rc == 0 and result['changed'] is False
    assert result['nvidia_gpu']['gpu_count'] == 2
    assert result['nvidia_gpu']['nvlink']['available'] is False


def test_found_on_path_by_name(tmp_path):
    write_fake_smi(tmp_path, rows=capture_rows())
    rc, result = run_module('nvidia_gpu_info', {'nvlink': False}, tmp_path=tmp_path,
                            env={'PATH': '%s:/usr/bin:/bin' % tmp_path})
    assert rc == 0, result
    assert result['nvidia_gpu']['driver_version'] == '580.159.04'


def test_unknown_fields_are_warned_about(tmp_path):
    path = write_fake_smi(tmp_path, rows=capture_rows(), unsupported=['fabric.state', 'fabric.status'])
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': path, 'nvlink': False}, tmp_path=tmp_path)
    assert rc == 0, result
    assert result['nvidia_gpu']['unsupported_fields'] == ['fabric.state', 'fabric.status']
    assert result['nvidia_gpu']['gpus'][0]['fabric_state'] is None
    assert any('fabric.state' in str(w) for w in result['warnings'])


def test_nvml_mismatch_with_exit_code_zero_still_fails(tmp_path):
    path = write_fake_smi(tmp_path, mode='mismatch', mismatch_rc=0)
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': path}, tmp_path=tmp_path)
    assert rc == 1 and result['failed'] is True
    assert result['error_kind'] == 'nvml_mismatch'
    assert 'Driver/library version mismatch' in result['msg'] and 'reboot' in result['msg']
    assert 'kernel_module_version' in result


def test_missing_binary_by_path(tmp_path):
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': str(tmp_path / 'nvidia-smi')}, tmp_path=tmp_path)
    assert rc == 1 and result['error_kind'] == 'missing'
    assert 'does not exist' in result['msg']


def test_missing_binary_on_path(tmp_path):
    rc, result = run_module('nvidia_gpu_info', {}, tmp_path=tmp_path, env={'PATH': str(tmp_path)})
    assert rc == 1 and result['error_kind'] == 'missing'
    assert 'not found on the PATH' in result['msg'] and 'nvidia_smi_path' in result['msg']


def test_no_gpu(tmp_path):
    path = write_fake_smi(tmp_path, mode='no-gpu')
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': path}, tmp_path=tmp_path)
    assert rc == 1 and result['error_kind'] == 'no_gpu'


def test_timeout(tmp_path):
    path = write_fake_smi(tmp_path, mode='hang')
    rc, result = run_module('nvidia_gpu_info', {'nvidia_smi_path': path, 'timeout': 1}, tmp_path=tmp_path)
    assert rc == 1 and result['error_kind'] == 'timeout'
    assert 'did not answer within 1s' in result['msg']


def test_bad_timeout(tmp_path):
    rc, result = run_module('nvidia_gpu_info', {'timeout': 0}, tmp_path=tmp_path)
    assert rc == 1 and 'timeout must be at least 1' in result['msg']
