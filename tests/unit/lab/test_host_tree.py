# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""lab/scripts/host-tree.py: the archive lab/playbooks/prepare-hosts.yml unpacks over a lab host's /."""

import json
import os
import subprocess
import sys
import tarfile
import time

import pytest
import yaml

from inkling_test_helpers import PROFILES, REPO, STANDIN, needs_program

SCRIPT = os.path.join(REPO, 'lab', 'scripts', 'host-tree.py')
CA = '-----BEGIN CERTIFICATE-----\nlab\n-----END CERTIFICATE-----\n'


def run(tmp_path, *args, out='host.tar'):
    res = subprocess.run([sys.executable, SCRIPT, '--out', str(tmp_path / out)] + list(args),
                         capture_output=True, text=True, check=False)
    return res


def members(path):
    with tarfile.open(path) as tar:
        return {m.name: (m, tar.extractfile(m).read().decode() if m.isfile() else None) for m in tar.getmembers()}


def profile_gpus(name):
    with open(os.path.join(PROFILES, name + '.json'), encoding='utf-8') as handle:
        data = json.load(handle)
    return data['driver_version'], [gpu['uuid'] for gpu in data['gpus']]


def test_h200_board(tmp_path):
    (tmp_path / 'ca.crt').write_text(CA)
    res = run(tmp_path, '--hostname', 'gpu-a', '--profile', 'h200-8', '--ca', str(tmp_path / 'ca.crt'))
    assert res.returncode == 0, res.stderr
    facts = json.loads(res.stdout)
    driver, uuids = profile_gpus('h200-8')
    assert facts == {'units': ['inkling-lab-gpu-host.service', 'nvidia-fabricmanager.service'],
                     'driver': driver, 'gpus': 8, 'changed': True}
    tree = members(tmp_path / 'host.tar')
    # Owned by root, relative to /, scripts executable.
    assert all(m.uid == 0 and m.gid == 0 and name.startswith('./') for name, (m, _content) in tree.items())
    assert tree['./usr/bin/nvidia-smi'][0].mode == 0o755
    assert tree['./usr/local/sbin/inkling-lab-gpu-fault'][0].mode == 0o755
    assert tree['./etc/containers/storage.conf'][0].mode == 0o644
    assert tree['./etc/inkling-lab/faults'][0].isdir()
    with open(STANDIN, encoding='utf-8') as handle:
        assert tree['./usr/bin/nvidia-smi'][1] == handle.read()
    assert tree['./etc/inkling-lab/profile'][1] == 'h200-8\n'
    assert tree['./etc/containers/certs.d/lab-registry:5000/ca.crt'][1] == CA
    assert tree['./usr/local/share/ca-certificates/inkling-lab-ca.crt'][1] == CA
    # The CDI spec names the profile's GPUs and driver libraries; the stale one another driver.
    spec = yaml.safe_load(tree['./etc/cdi/nvidia.yaml'][1])
    assert [d['name'] for d in spec['devices']] == [str(i) for i in range(8)] + uuids + ['all']
    assert {m['hostPath'] for m in spec['containerEdits']['mounts']} == {
        '/usr/lib/x86_64-linux-gnu/libcuda.so.' + driver, '/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.' + driver}
    assert './usr/lib/x86_64-linux-gnu/libcuda.so.' + driver in tree
    assert '570.133.20' in tree['./usr/local/share/inkling-lab/cdi/nvidia-stale.yaml'][1]
    assert yaml.safe_load(tree['./usr/local/share/inkling-lab/cdi/nvidia-gids.yaml'][1])['cdiVersion'] == '0.7.0'
    lspci = tree['./usr/local/share/inkling-lab/lspci-nvidia.txt'][1].splitlines()
    assert sum('H200 SXM 141GB' in line for line in lspci) == 8
    assert sum('NVSwitch' in line for line in lspci) == 4
    assert driver in tree['./etc/inkling-lab/proc-driver-nvidia-version'][1]
    assert 'gpu-a kernel: NVRM' in tree['./usr/local/share/inkling-lab/kernel-log'][1]
    assert 'ib_umad' not in tree['./etc/inkling-lab/proc-modules'][1]
    assert './var/lib/inkling/flashinfer-cubins/README.lab' not in tree


def test_b200_board_is_nvlink5_with_cubins(tmp_path):
    res = run(tmp_path, '--hostname', 'gpu-b', '--profile', 'b200-8')
    assert res.returncode == 0, res.stderr
    tree = members(tmp_path / 'host.tar')
    assert tree['./etc/inkling-lab/proc-modules'][1].splitlines()[0].startswith('ib_umad ')
    assert './usr/local/share/inkling-lab/nvlink5' in tree
    assert './var/lib/inkling/flashinfer-cubins/README.lab' in tree
    assert sum('NVSwitch' in line for line in tree['./usr/local/share/inkling-lab/lspci-nvidia.txt'][1].splitlines()) == 2
    # Without --ca no CA is shipped.
    assert not [name for name in tree if 'ca.crt' in name or 'ca-certificates' in name]


def test_vm_guest_has_no_fabric_manager(tmp_path):
    res = run(tmp_path, '--hostname', 'gpu-c', '--profile', 'h200-2')
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)['units'] == ['inkling-lab-gpu-host.service']
    tree = members(tmp_path / 'host.tar')
    assert './etc/systemd/system/nvidia-fabricmanager.service' not in tree
    assert 'NVSwitch' not in tree['./usr/local/share/inkling-lab/lspci-nvidia.txt'][1]


def test_same_inputs_same_bytes(tmp_path):
    first = run(tmp_path, '--hostname', 'gpu-a', '--profile', 'h200-8')
    data = (tmp_path / 'host.tar').read_bytes()
    time.sleep(1.1)  # a clock-dependent archive would differ now
    again = run(tmp_path, '--hostname', 'gpu-a', '--profile', 'h200-8')
    assert json.loads(first.stdout)['changed'] is True
    assert json.loads(again.stdout)['changed'] is False
    assert (tmp_path / 'host.tar').read_bytes() == data
    other = run(tmp_path, '--hostname', 'gpu-b', '--profile', 'h200-8')
    assert json.loads(other.stdout)['changed'] is True


def test_unknown_profile_is_refused(tmp_path):
    res = run(tmp_path, '--hostname', 'gpu-x', '--profile', 'a100-8')
    assert res.returncode == 1
    assert 'gpu-x: lab_gpu_profile is a100-8; set it to one of b200-8, h100-8, h200-2, h200-8' in res.stderr
    assert not (tmp_path / 'host.tar').exists()


@needs_program('tar')
def test_unpack_keeps_faults_and_directories(tmp_path):
    """What the playbook runs on the host: tar --no-overwrite-dir -xf ARCHIVE -C /."""
    root = tmp_path / 'root'
    (root / 'etc' / 'inkling-lab' / 'faults').mkdir(parents=True)
    (root / 'etc' / 'inkling-lab' / 'faults' / 'mig-enabled').write_text('')
    os.chmod(root / 'etc', 0o750)
    (root / 'etc' / 'cdi').mkdir()
    (root / 'etc' / 'cdi' / 'nvidia.yaml').write_text('altered by a fault\n')
    assert run(tmp_path, '--hostname', 'gpu-a', '--profile', 'h200-8').returncode == 0
    subprocess.run(['tar', '--no-overwrite-dir', '-xf', str(tmp_path / 'host.tar'), '-C', str(root)], check=True)
    assert (root / 'etc' / 'inkling-lab' / 'faults' / 'mig-enabled').exists()
    assert os.stat(root / 'etc').st_mode & 0o777 == 0o750
    assert 'kind: nvidia.com/gpu' in (root / 'etc' / 'cdi' / 'nvidia.yaml').read_text()
    assert os.access(root / 'usr' / 'bin' / 'nvidia-smi', os.X_OK)


@pytest.mark.parametrize('name', ['h200-8', 'b200-8', 'h100-8', 'h200-2'])
def test_every_profile_packs(tmp_path, name):
    res = run(tmp_path, '--hostname', 'h', '--profile', name)
    assert res.returncode == 0, res.stderr
    driver, uuids = profile_gpus(name)
    spec = yaml.safe_load(members(tmp_path / 'host.tar')['./etc/cdi/nvidia.yaml'][1])
    assert [d['name'] for d in spec['devices']][len(uuids):-1] == uuids
    assert json.loads(res.stdout)['driver'] == driver
