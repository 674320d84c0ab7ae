# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The fixtures of the simulated GPU hosts of bench/rollout_scale.py, recorded once per benchmark run.

- ``nvidia_gpu_info``: the real module run against the lab's nvidia-smi stand-in with the ``h200-8`` profile
  (the values of the real 2x H200 capture, tests/unit/fixtures/nvidia-smi/h200-2gpu-driver580, on an 8-GPU HGX
  board) and the lab's lspci stand-in lines (4 NVSwitch bridges);
- ``host_facts``: what inkling.fleet.preflight_host_facts reports on a lab H200 host, each part parsed by the
  module's own parsers from the files lab/scripts/host-tree.py writes for such a host (driver version file,
  /proc/modules, kernel log, lspci, CDI spec); podman 5.4.2 (Debian trixie, the lab's hosts), disks of an
  HGX node (3.5 TB free on the hub cache's file system), 2 TiB of RAM;
- ``systemd_show``: the unit's properties (fixtures/systemctl-show.txt) parsed by the systemd_service
  module's own parser;
- ``hub_files``: the revision's file list from the benchmark's fake hub (lab/hub);
- ``golden_answers``: the lab stand-in's answer table (lab/standin/answers.json);
- ``trial_answer``: what the image trial's script printed for the image of the reference deployment on a
  real H200 machine (torch 2.11.0+cu130, lab/standin/site/torch/_C.py);
- ``compile_cache_files``: what the lab's vLLM stand-in writes to its compile cache at a cold start.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(REPO, 'collections')
PROFILE = 'h200-8'
PODMAN_VERSION = '5.4.2'
GIB = 1024 ** 3


def _host_tree():
    spec = importlib.util.spec_from_file_location('inkling_lab_host_tree', os.path.join(REPO, 'lab', 'scripts', 'host-tree.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _collection(name):
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    __import__('ansible_collections.inkling.fleet.plugins.module_utils.' + name)
    return sys.modules['ansible_collections.inkling.fleet.plugins.module_utils.' + name]


def gpu_info(work, lspci_text):
    """inkling.fleet.nvidia_gpu_info, run for real against the lab's stand-ins."""
    lspci = os.path.join(work, 'lspci')
    with open(os.path.join(work, 'lspci-nvidia.txt'), 'w') as handle:
        handle.write(lspci_text)
    with open(lspci, 'w') as handle:
        handle.write('#!/bin/sh\ncat %s\n' % os.path.join(work, 'lspci-nvidia.txt'))
    os.chmod(lspci, 0o755)
    smi = os.path.join(REPO, 'lab', 'nvidia-smi', 'nvidia-smi')
    args_file = os.path.join(work, 'gpu-info-args.json')
    with open(args_file, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': {'nvidia_smi_path': smi, 'lspci_path': lspci}}, handle)
    env = dict(os.environ, INKLING_LAB_PROFILE=PROFILE,
               INKLING_LAB_PROFILES_DIR=os.path.join(REPO, 'lab', 'nvidia-smi', 'profiles'),
               INKLING_LAB_CONF_DIR=os.path.join(work, 'no-conf'), INKLING_LAB_FAULTS_DIR=os.path.join(work, 'no-faults'),
               PYTHONPATH=COLLECTIONS + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'plugins', 'modules', 'nvidia_gpu_info.py'), args_file],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)
    out = proc.stdout.decode('utf-8', 'replace')
    result = json.loads(out[out.index('{'):])
    if proc.returncode != 0 or 'nvidia_gpu' not in result:
        raise RuntimeError('nvidia_gpu_info against the stand-in failed: %s' % result.get('msg', out[-500:]))
    # as the task calls it on a host (preflight_nvidia_smi_path, preflight_lspci_path)
    result['invocation'] = {'module_args': {'nvidia_smi_path': 'nvidia-smi', 'lspci_path': 'lspci', 'timeout': 30,
                                            'nvlink': True}}
    return result


def host_facts(files, hub_cache_dir='/var/lib/inkling/huggingface/hub'):
    pc = _collection('preflight_checks')
    gh = _collection('gpu_health')
    share = '/usr/local/share/inkling-lab/'

    def text(path):
        return files[path][1].decode('utf-8')

    driver = pc.parse_driver_version_file(text('/etc/inkling-lab/proc-driver-nvidia-version'))
    lspci = text(share + 'lspci-nvidia.txt')
    nvrm = [line for line in text(share + 'kernel-log').splitlines() if 'NVRM' in line]
    modules = sorted(set(line.split()[0] for line in text('/etc/inkling-lab/proc-modules').splitlines() if line.strip()))
    cdi = pc.parse_cdi_spec(text('/etc/cdi/nvidia.yaml'), '/etc/cdi/nvidia.yaml', yaml.safe_load)
    cdi['missing_host_paths'] = []
    free = 3500 * 1000 ** 3
    return {
        'effective_user': {'uid': 0, 'name': 'root'},
        'kernel_module_version': driver,
        'userspace_driver_versions': [driver],
        'apt_nvidia_event': None,
        'fabricmanager': {'unit': 'nvidia-fabricmanager', 'installed': True, 'active': True, 'state': 'active',
                          'version': driver, 'version_source': 'nv-fabricmanager'},
        'nvswitch_count': pc.count_nvswitch(lspci),
        'lspci_nvidia': lspci.splitlines(),
        'lspci_error': None,
        'kernel_log': {'source': 'journalctl -k -b', 'events': gh.parse_kernel_log('\n'.join(nvrm)),
                       'nvrm_lines': len(nvrm), 'error': None},
        'nvlink5': {'kernel_modules': modules, 'kernel_modules_error': None, 'infiniband_devices': [],
                    'umad_devices': [], 'nvlsm': {'installed': False, 'path': None, 'running': False}},
        'cdi_specs': [cdi],
        'containers_conf_cdi_spec_dirs': None,
        'podman': {'found': True, 'path': 'podman', 'version': PODMAN_VERSION, 'graph_root': '/var/lib/containers/storage',
                   'tmp_dir': '/var/tmp', 'error': None},
        'disk': {'hub_cache': {'path': hub_cache_dir, 'existing': hub_cache_dir, 'device': 66305, 'free_bytes': free},
                 'graphroot': {'path': '/var/lib/containers/storage', 'existing': '/var/lib/containers/storage',
                               'device': 66305, 'free_bytes': free},
                 'tmpdir': {'path': '/var/tmp', 'existing': '/var/tmp', 'device': 66305, 'free_bytes': free}},
        'hub_cache_model_bytes': 0,
        'hub_cache_staging_missing_bytes': None,
        'shm_bytes': 1024 * GIB,
        'selinux': 'disabled',
        'selinux_container_use_devices': None,
        'nvidia_ctk_path': '/usr/bin/nvidia-ctk',
    }


def systemd_show():
    from ansible.modules.systemd_service import parse_systemctl_show  # pylint: disable=import-outside-toplevel
    with open(os.path.join(HERE, 'fixtures', 'systemctl-show.txt')) as handle:
        lines = [line.rstrip('\n') for line in handle if not line.startswith('#')]
    return parse_systemctl_show(lines)


def hub_files(hub_url, repo_id, revision):
    hf_fanout = _collection('hf_fanout')
    url = '%s/api/models/%s/revision/%s?blobs=true' % (hub_url.rstrip('/'), repo_id, revision)
    with urllib.request.urlopen(url, timeout=30) as resp:
        info = json.loads(resp.read())
    files, error = hf_fanout.hub_files(info, revision)
    if error:
        raise RuntimeError('the fake hub\'s file list of %s@%s: %s' % (repo_id, revision, error))
    return {'repo_id': repo_id, 'revision': revision, 'files': files}


def golden_answers():
    with open(os.path.join(REPO, 'lab', 'standin', 'answers.json')) as handle:
        table = json.load(handle)['answers']
    return dict((' '.join(prompt.split()), entry['answer']) for prompt, entry in table.items())


def compile_cache_files():
    """The lab stand-in's cold start writes a marker and one compile cache entry under VLLM_CACHE_ROOT."""
    entry = json.dumps({'key': '6c1f0e2a9d4b7c31', 'inputs': {'arch': 'sm_90', 'tp': 8}, 'compiled': 1765055049.2})
    files = []
    for path, content in (('vllm/torch_compile_cache/standin/compiled', 'compiled\n'),
                          ('vllm/torch_compile_cache/standin/6c1f0e2a9d4b7c31/entry.json', entry)):
        raw = content.encode('utf-8')
        files.append({'path': path, 'size': len(raw), 'sha256': hashlib.sha256(raw).hexdigest()})
    return files


def build(hub_url, repo_id, revision):
    """Every fixture, as one JSON-able dict."""
    tree = _host_tree()
    files = tree.host_files('sim-h200-template', PROFILE)[0]
    lspci = files['/usr/local/share/inkling-lab/lspci-nvidia.txt'][1].decode('utf-8')
    work = tempfile.mkdtemp(prefix='inkling-scale-fixtures-')
    try:
        gpu = gpu_info(work, lspci)
    finally:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        os.rmdir(work)
    return {
        'nvidia_gpu_info': gpu,
        'host_facts': host_facts(files),
        'systemd_show': systemd_show(),
        'hub_files': hub_files(hub_url, repo_id, revision),
        'golden_answers': golden_answers(),
        'trial_answer': {'python': '3.12.3', 'torch_version': '2.11.0+cu130', 'cuda_version': '13.0',
                         'arch_list': ['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120'],
                         'vllm_version': '0.25.0', 'parser': 'vllm.entrypoints.cli.main', 'args_ok': True},
        'compile_cache_files': compile_cache_files(),
        # an HGX H200 node: 2 TiB of RAM, most of it free while vLLM serves from GPU memory
        'meminfo': {'MemTotal': 2063 * GIB, 'MemAvailable': 1890 * GIB},
    }


def staged_host(fixtures, images, hub_cache_dir='/var/lib/inkling/huggingface/hub'):
    """A host that staging has prepared and nothing else: the image and the snapshot are there, the staging
    environment holds huggingface_hub 2.4.0, no unit, no service, no record."""
    hub = fixtures['hub_files']
    return {
        'images': list(images),
        'snapshots': {'%s@%s' % (hub['repo_id'], hub['revision']): dict((f['path'], f['etag']) for f in hub['files'])},
        'blobs': dict((f['etag'], f['size']) for f in hub['files']),
        'venv_huggingface_hub_version': '2.4.0',
        'dirs': [hub_cache_dir],
        'files': {},
        'secrets': {},
        'service': {'active': False, 'n_restarts': 0, 'main_pid': 4000},
        'cache_sets': {},
    }
