#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: preflight_host_facts
short_description: Gather the host state a GPU model server depends on (read-only)
version_added: "0.1.0"
description:
  - Reads, without changing anything, what C(inkling.fleet.preflight) checks besides the GPUs themselves
    (those come from M(inkling.fleet.nvidia_gpu_info)).
  - The loaded NVIDIA kernel module version (from the driver version file), the user-space driver
    library versions (C(libnvidia-ml.so.*)) and the last apt history entry that changed an NVIDIA package.
  - The fabric manager unit state (C(systemctl show)) and version (C(nv-fabricmanager --version), then the
    package database through C(dpkg-query) or C(rpm)), and the NVSwitch devices the host sees (C(lspci -d 10de:)).
  - CDI specs for C(nvidia.com/gpu) in the given directories (device names, hostPaths, which hostPaths are missing)
    and C(cdi_spec_dirs) set in containers.conf.
  - The podman version, graph root and temporary directory; free space where the hub cache, the graph root and
    the temporary directory live (nearest existing parent); bytes already downloaded for the model; the size of
    C(/dev/shm); the SELinux mode and its C(container_use_devices) boolean.
  - NVRM Xid events of the kernel log since boot (C(journalctl -k -b), else C(dmesg)), parsed, not the log itself.
  - For NVLink5 boards, the loaded kernel modules, the InfiniBand and umad devices and the NVLink Subnet Manager
    (C(nvlsm) installed, running).
  - A missing tool (no podman, no lspci, no systemd) is reported in the facts, never an error.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  cdi_dirs:
    description: Directories searched for CDI specs (C(*.yaml), C(*.yml), C(*.json)).
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  podman_path:
    description: The podman binary (name on C(PATH) or absolute path).
    type: str
    default: podman
  hub_cache_dir:
    description: The Hugging Face hub cache directory the model is downloaded to (it may not exist yet).
    type: path
    required: true
  model:
    description: Model repository id, to count bytes already in the hub cache (C(models--org--name/blobs)).
    type: str
  staging_files:
    description:
      - The hub's file list of the revision this host would stage (each with C(etag) and C(size); what
        M(inkling.fleet.hf_hub_files) returns, read once on the controller). With it,
        RV(host_facts.hub_cache_staging_missing_bytes) counts the bytes of those blobs that O(model)'s folder does
        not hold, the figure the C(inkling.fleet.hf_cache) role's space check asks for, before the margin.
    type: list
    elements: dict
  shm_path:
    description: The shared memory mount.
    type: path
    default: /dev/shm
  containers_conf:
    description: containers.conf files and drop-in directories read for C(cdi_spec_dirs) and C(image_copy_tmp_dir).
    type: list
    elements: path
    default: [/usr/share/containers/containers.conf, /etc/containers/containers.conf, /etc/containers/containers.conf.d]
  apt_history:
    description: apt history log, read to name what last changed NVIDIA packages.
    type: path
    default: /var/log/apt/history.log
notes:
  - CDI specs are parsed with PyYAML when the host has it, otherwise with a line reader that handles what
    C(nvidia-ctk cdi generate) writes.
seealso:
  - module: inkling.fleet.nvidia_gpu_info
  - module: inkling.fleet.preflight_evaluate
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
  - inkling.fleet.gpu_host
'''

EXAMPLES = r'''
- name: Gather host facts for preflight
  inkling.fleet.preflight_host_facts:
    hub_cache_dir: /var/lib/inkling/huggingface/hub
    model: thinkingmachines/Inkling-NVFP4
  register: host_facts
'''

RETURN = r'''
host_facts:
  description: What was found on the host.
  returned: always
  type: dict
  contains:
    effective_user:
      description: The user the module runs as (C(uid), C(name)); root unless become is missing.
      type: dict
      sample: {uid: 0, name: root}
    kernel_module_version:
      description: Loaded NVIDIA kernel module version, null when the version file is missing.
      type: str
      sample: 580.159.04
    userspace_driver_versions:
      description: Versions of the C(libnvidia-ml.so.*) libraries installed.
      type: list
      elements: str
      sample: [580.159.04]
    apt_nvidia_event:
      description: Last apt history entry that installed or upgraded an NVIDIA package (C(commandline), C(start_date), C(packages)).
      type: dict
    fabricmanager:
      description: Fabric manager unit C(installed) (bool), C(active) (bool), C(state), C(version), C(version_source).
      type: dict
      sample: {installed: true, active: true, state: active, version: 580.159.04, version_source: nv-fabricmanager}
    nvswitch_count:
      description: NVSwitch devices in C(lspci -d 10de:); null when lspci is missing.
      type: int
      sample: 4
    lspci_nvidia:
      description: The C(lspci -d 10de:) lines.
      type: list
      elements: str
    cdi_specs:
      description: CDI specs found (C(path), C(kind), C(devices), C(host_paths), C(missing_host_paths), C(error)).
      type: list
      elements: dict
    containers_conf_cdi_spec_dirs:
      description: C(cdi_spec_dirs) set in containers.conf, null when unset.
      type: list
      elements: str
    podman:
      description: C(found), C(path), C(version), C(graph_root), C(tmp_dir), C(error).
      type: dict
      sample: {found: true, version: 5.4.2, graph_root: /var/lib/containers/storage, tmp_dir: /var/tmp}
    disk:
      description: For C(hub_cache), C(graphroot) and C(tmpdir), the C(path), nearest C(existing) parent, C(device) and C(free_bytes).
      type: dict
    hub_cache_model_bytes:
      description: Bytes already under the model's C(blobs/) in the hub cache.
      type: int
    hub_cache_staging_missing_bytes:
      description:
        - Bytes of the O(staging_files) blobs the hub cache does not hold (a blob of another revision counts only
          when the new revision lists it too); null without O(staging_files).
      type: int
    shm_bytes:
      description: Size of C(/dev/shm) in bytes, null when absent.
      type: int
    selinux:
      description: C(enforcing), C(permissive) or C(disabled).
      type: str
    selinux_container_use_devices:
      description: The SELinux boolean C(container_use_devices); null when SELinux is disabled or it cannot be read.
      type: bool
    kernel_log:
      description:
        - NVRM events of the kernel log since boot. C(source) is the command read (C(journalctl -k -b) or C(dmesg)),
          C(events) one entry per Xid code and GPU (C(code), C(pci) as the kernel writes it, C(time_s) seconds
          after boot, C(text), C(count)), C(error) why no log was read.
      type: dict
      sample:
        source: journalctl -k -b
        events:
          - {code: 79, pci: "0000:2b:00", time_s: 1843.3, count: 2,
             text: "[ 1843.308145] host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."}
        error: null
    nvlink5:
      description: C(kernel_modules) (loaded, null when unreadable), C(infiniband_devices), C(umad_devices) and
        C(nvlsm) (C(installed), C(path), C(running)).
      type: dict
    nvidia_ctk_path:
      description: Path of C(nvidia-ctk) (NVIDIA Container Toolkit), null when not installed.
      type: str
'''

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import host_probe as hp
from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc

try:
    import yaml
    YAML_LOAD = yaml.safe_load
except ImportError:  # pragma: no cover - depends on the host
    YAML_LOAD = None

LIB_GLOBS = ['/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*', '/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*',
             '/usr/lib64/libnvidia-ml.so.*', '/usr/lib/libnvidia-ml.so.*']
MAX_SPEC_BYTES = 4 * 1024 * 1024


def read_text(path, limit=MAX_SPEC_BYTES):
    return hp.read_text(path, limit)


def nearest_existing(path):
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def disk_info(path):
    existing = nearest_existing(path)
    try:
        st = os.statvfs(existing)
        dev = os.stat(existing).st_dev
    except OSError:
        return {'path': path, 'existing': existing, 'device': None, 'free_bytes': None}
    return {'path': path, 'existing': existing, 'device': dev, 'free_bytes': st.f_bavail * st.f_frsize}


def conf_files(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(sorted(glob.glob(os.path.join(path, '*.conf'))))
        elif os.path.isfile(path):
            files.append(path)
    return files


def containers_conf(paths):
    cdi_dirs, tmp_dir = None, None
    for path in conf_files(paths):
        text = read_text(path) or ''
        dirs = pc.parse_containers_conf_cdi_dirs(text)
        if dirs is not None:
            cdi_dirs = dirs
        for line in text.splitlines():
            line = line.strip()
            if line.startswith('image_copy_tmp_dir'):
                value = line.split('=', 1)[1].strip().strip('"\'')
                if value.startswith('/'):
                    tmp_dir = value
    return cdi_dirs, tmp_dir


def podman_facts(module, tmp_dir):
    podman = {'found': False, 'path': module.params['podman_path'], 'version': None,
              'graph_root': '/var/lib/containers/storage', 'tmp_dir': tmp_dir or '/var/tmp', 'error': None}
    rc, out, err = hp.run(module, [module.params['podman_path'], '--version'])
    if rc is None:
        podman['error'] = '%s not found' % module.params['podman_path']
        return podman
    if rc != 0:
        podman['error'] = (err or out).strip()
        return podman
    podman['found'] = True
    podman['version'] = pc.parse_podman_version(out)
    rc, out, err = hp.run(module, [module.params['podman_path'], 'info', '--format', 'json'])
    if rc == 0:
        try:
            info = json.loads(out)
            podman['graph_root'] = (info.get('store') or {}).get('graphRoot') or podman['graph_root']
        except ValueError:
            podman['error'] = 'podman info: unreadable JSON'
    else:
        podman['error'] = 'podman info failed: %s' % (err or out).strip()[:500]
    return podman


def cdi_specs(dirs):
    specs = []
    for directory in dirs:
        for path in sorted(glob.glob(os.path.join(directory, '*'))):
            if not path.endswith(('.yaml', '.yml', '.json')) or not os.path.isfile(path):
                continue
            text = read_text(path)
            if text is None:
                specs.append({'path': path, 'kind': None, 'devices': [], 'host_paths': [],
                              'error': 'cannot read %s' % path, 'missing_host_paths': []})
                continue
            spec = pc.parse_cdi_spec(text, path, YAML_LOAD)
            spec['missing_host_paths'] = [p for p in spec['host_paths'] if not os.path.exists(p)]
            specs.append(spec)
    return specs


def blobs_bytes(hub_cache_dir, model):
    if not model:
        return 0
    blobs = os.path.join(hub_cache_dir, 'models--' + model.replace('/', '--'), 'blobs')
    total = 0
    for entry in glob.glob(os.path.join(blobs, '*')):
        if entry.endswith('.incomplete'):
            continue
        try:
            st = os.lstat(entry)
        except OSError:
            continue
        total += st.st_size
    return total


def main():
    module = AnsibleModule(
        argument_spec=dict(
            driver_version_file=dict(type='path', default='/proc/driver/nvidia/version'),
            fabricmanager_unit=dict(type='str', default='nvidia-fabricmanager'),
            fabricmanager_path=dict(type='str', default='nv-fabricmanager'),
            cdi_dirs=dict(type='list', elements='path', default=['/etc/cdi', '/var/run/cdi']),
            podman_path=dict(type='str', default='podman'),
            lspci_path=dict(type='str', default='lspci'),
            hub_cache_dir=dict(type='path', required=True),
            model=dict(type='str'),
            staging_files=dict(type='list', elements='dict'),
            shm_path=dict(type='path', default='/dev/shm'),
            containers_conf=dict(type='list', elements='path',
                                 default=['/usr/share/containers/containers.conf', '/etc/containers/containers.conf',
                                          '/etc/containers/containers.conf.d']),
            apt_history=dict(type='path', default='/var/log/apt/history.log'),
            kernel_modules_file=dict(type='path', default='/proc/modules'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    facts = {}
    facts['effective_user'] = hp.effective_user()
    facts['kernel_module_version'] = pc.parse_driver_version_file(read_text(p['driver_version_file']))
    versions = set()
    for pattern in LIB_GLOBS:
        for lib in glob.glob(pattern):
            ver = pc.version_str(lib.rsplit('.so.', 1)[-1])
            if ver and ver.count('.') >= 1:
                versions.add(ver)
    facts['userspace_driver_versions'] = sorted(versions, key=pc.parse_version)
    facts['apt_nvidia_event'] = pc.parse_apt_history_nvidia(read_text(p['apt_history'], 16 * 1024 * 1024))
    facts['fabricmanager'] = hp.fabricmanager_facts(module, p['fabricmanager_unit'], p['fabricmanager_path'])
    facts['nvswitch_count'], facts['lspci_nvidia'], facts['lspci_error'] = hp.nvswitch_facts(module, p['lspci_path'])
    facts['kernel_log'] = hp.kernel_log(module)
    facts['nvlink5'] = hp.nvlink5_facts(module, p['kernel_modules_file'])
    facts['cdi_specs'] = cdi_specs(p['cdi_dirs'])
    conf_cdi_dirs, tmp_dir = containers_conf(p['containers_conf'])
    facts['containers_conf_cdi_spec_dirs'] = conf_cdi_dirs
    facts['podman'] = podman_facts(module, tmp_dir)
    facts['disk'] = {
        'hub_cache': disk_info(p['hub_cache_dir']),
        'graphroot': disk_info(facts['podman']['graph_root']),
        'tmpdir': disk_info(facts['podman']['tmp_dir']),
    }
    facts['hub_cache_model_bytes'] = blobs_bytes(p['hub_cache_dir'], p['model'])
    facts['hub_cache_staging_missing_bytes'] = None
    if p['staging_files'] is not None and p['model']:
        facts['hub_cache_staging_missing_bytes'] = hc.missing_bytes(hc.repo_dir(p['hub_cache_dir'], p['model']),
                                                                    p['staging_files'])
    try:
        st = os.statvfs(p['shm_path'])
        facts['shm_bytes'] = st.f_blocks * st.f_frsize
    except OSError:
        facts['shm_bytes'] = None
    facts['selinux'] = hp.selinux_mode(module)
    facts['selinux_container_use_devices'] = (
        None if facts['selinux'] == 'disabled' else hp.selinux_boolean(module, 'container_use_devices'))
    facts['nvidia_ctk_path'] = module.get_bin_path('nvidia-ctk')
    module.exit_json(changed=False, host_facts=facts)


if __name__ == '__main__':
    main()
