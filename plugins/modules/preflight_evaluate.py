#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: preflight_evaluate
short_description: Judge whether a GPU host can serve a model variant
version_added: "0.1.0"
description:
  - Runs every preflight check on facts already gathered (M(inkling.fleet.nvidia_gpu_info),
    M(inkling.fleet.preflight_host_facts), M(inkling.fleet.inkling_variant)) and returns all results at once,
    each with what was C(found), what is C(expected) and the C(remedy).
  - Checks the driver (NVML answers, kernel module loaded and equal to the driver, at or above the variant's
    minimum), the GPUs (count equals the tensor parallel size, MIG off, persistence on, no uncorrected ECC
    errors, no pending or failed row remapping), the fabric (fabric manager installed, active and of the
    driver's version where the host sees NVSwitch devices; fabric state Completed/Success wherever a GPU
    reports one), CDI (a spec listing C(nvidia.com/gpu=all) and every GPU, made for the running driver, in a
    directory podman reads, of a C(cdiVersion) the installed podman parses), podman (present, new enough, not a
    known-bad release), disk space, the host paths the variant mounts into the container (for example the
    FlashInfer cubins on Blackwell), shared memory and SELinux (C(container_use_devices), C(label=disable)).
  - Also the GPUs' recovery action, Xid events since boot that mean a bad GPU (by GPU index and PCI bus id),
    and on NVLink5 HGX boards the InfiniBand management stack and NVLSM the fabric manager needs.
  - Never fails itself; the caller decides what to do with C(ok).
  - Computation over the facts given, except that it checks on the host whether each mount source of the
    variant exists.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  gpu:
    description: The C(nvidia_gpu) facts; omit when M(inkling.fleet.nvidia_gpu_info) failed.
    type: dict
  gpu_error:
    description: The error message of M(inkling.fleet.nvidia_gpu_info) when it failed.
    type: str
  host_facts:
    description: The C(host_facts) of M(inkling.fleet.preflight_host_facts).
    type: dict
    required: true
  variant:
    description: The variant picked by M(inkling.fleet.inkling_variant); omit when none fits.
    type: dict
  variant_error:
    description: Why no variant was picked (the message of M(inkling.fleet.inkling_variant)).
    type: str
  variant_refusals:
    description:
      - The C(refusals) of M(inkling.fleet.inkling_variant) when it refused the host. A reason whose root
        cause another check reports (C(gpu.count), C(gpu.mig)) is not repeated; memory and driver-floor
        reasons become the C(gpu.memory) and C(driver.version) results; the C(variant) result then names
        those checks instead of repeating them.
    type: list
    elements: dict
    default: []
  nvml_library_version:
    description: On an NVML mismatch, the user-space NVML library version nvidia-smi printed (for the message).
    type: str
  tensor_parallel_size:
    description: GPUs the model is served on; the host must have exactly this many.
    type: int
    default: 8
  podman_min_version:
    description: Oldest podman the service supports (quadlet needs 4.4).
    type: str
    default: '4.4'
  podman_api_key_min_version:
    description:
      - When the service has an API key, the oldest podman that does not re-create its secret on every run (which
        would restart the host on every rollout). Omit when there is no API key.
    type: str
    version_added: "0.2.0"
  service_listen:
    description:
      - What the service will listen on, for the API key check (C(service.api_key)); omitted, nothing is checked.
      - C(host) is C(service_host), C(api_key) whether C(service_api_key) is set, C(allow_no_api_key) the
        C(service_allow_no_api_key) opt-out. A server beyond loopback without a key fails.
    type: dict
    version_added: "0.2.0"
  podman_bad_versions:
    description:
      - podman releases known to break something the service uses.
      - Each has C(version), C(reason), optionally C(remedy) and C(cdi_spec_dirs) (the only CDI directories
        that release reads; then the CDI check decides, and the release alone is a warning).
    type: list
    elements: dict
    default: []
  cdi_dirs:
    description: CDI directories podman reads by default.
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  disk_margin_pct:
    description: Margin added to the model size for the hub cache free space check, in percent.
    type: int
    default: 10
  image_free_bytes:
    description: Free space needed in podman's graph root for image pulls.
    type: int
    default: 0
  tmp_free_bytes:
    description: Free space needed in podman's temporary directory for image pulls.
    type: int
    default: 0
  shm_min_mib:
    description: Shared memory NCCL needs at the tensor parallel size, in MiB.
    type: int
    default: 1024
  service_ipc_host:
    description: Whether the service runs the container with C(--ipc=host) (then the host's C(/dev/shm) counts).
    type: bool
    default: true
  fabricmanager_unit:
    description: systemd unit of the fabric manager, for messages.
    type: str
    default: nvidia-fabricmanager
  fabric_waited_s:
    description: Seconds already spent waiting for fabric registration, for messages.
    type: int
    default: 0
  podman_cdi_versions:
    description:
      - The CDI spec versions each podman minor release can parse, one row per release (C(podman) as C(X.Y),
        C(cdi_library), C(cdi_spec_max), C(source)); the C(cdi.version) check compares the spec's C(cdiVersion)
        (and the version its keys need) with the row of the installed podman. Empty skips the check.
    type: list
    elements: dict
    default: []
  service_label_disable:
    description: Whether the service runs its container with C(label=disable) (then SELinux enforcing is fine).
    type: bool
    default: true
  xid_ignore:
    description: Xid codes never reported (for example after an operator has checked them).
    type: list
    elements: int
    default: []
  xid_since_s:
    description: Xid events logged earlier than this many seconds after boot are not reported (a GPU reset since).
    type: float
    default: 0
  replica_rdma_dir:
    description:
      - For a member of a multi-node replica (O(variant) carries C(replica)), where the RDMA devices are listed
        (check C(replica.fabric)). A worker also probes its head's rendezvous port (check C(replica.rendezvous)).
    type: path
    default: /sys/class/infiniband
  replica_rdma_required:
    description: Without RDMA devices, C(replica.fabric) fails (true) or only warns (false).
    type: bool
    default: true
  replica_probe_timeout_s:
    description: Seconds a worker waits for its head's rendezvous port to answer.
    type: float
    default: 3
seealso:
  - module: inkling.fleet.preflight_host_facts
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
  - inkling.fleet.host_name
'''

EXAMPLES = r'''
- name: Evaluate preflight checks
  inkling.fleet.preflight_evaluate:
    host: "{{ inventory_hostname }}"
    gpu: "{{ gpu_info.nvidia_gpu | default(omit) }}"
    gpu_error: "{{ gpu_info.msg | default(omit) if gpu_info.nvidia_gpu is not defined else omit }}"
    host_facts: "{{ host_facts.host_facts }}"
    variant: "{{ variant_result.variant | default(omit) }}"
    tensor_parallel_size: 8
  register: preflight
'''

RETURN = r'''
report:
  description: The result of every check (the top-level key C(warnings) is reserved by Ansible, hence the nesting).
  returned: always
  type: dict
  contains:
    ok:
      description: True when no check of level C(error) failed.
      type: bool
    checks:
      description:
        - Every check, each with C(check), C(ok), C(level) (C(error) or C(warning)), C(found), C(expected), C(remedy),
          C(message).
        - A check that could not be made (for example the fabric manager version while nvidia-smi cannot answer) has
          C(ok=true), C(skipped=true) and says why in C(message).
      type: list
      elements: dict
      sample:
        - check: gpu.count
          ok: false
          level: error
          found: 7
          expected: 8
          remedy: a GPU is missing or was not detected ...
          message: expected 8 GPUs for tensor_parallel_size=8, found 7
    failures:
      description: The failed checks of level C(error).
      type: list
      elements: dict
    warnings:
      description: The failed checks of level C(warning).
      type: list
      elements: dict
    fixable:
      description: What C(preflight_fix) can repair among the failures (C(persistence), C(cdi), C(fabricmanager)).
      type: list
      elements: str
    fabric_pending:
      description: True when a GPU's fabric registration is still in progress (worth a bounded wait).
      type: bool
summary:
  description: One message naming the host and every failure with its remedy.
  returned: always
  type: str
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import gpu_health as gh
from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc
from ansible_collections.inkling.fleet.plugins.module_utils import replica as rep


def replica_checks(p):
    """For a member of a multi-node replica: the rendezvous port and the RDMA devices."""
    replica = (p['variant'] or {}).get('replica')
    if not replica:
        return []
    outcome = None
    if replica.get('role') != 'head':
        outcome = rep.probe(replica['head_address'], int(replica['port']), p['replica_probe_timeout_s'])
    path = p['replica_rdma_dir']
    devices = sorted(os.listdir(path)) if os.path.isdir(path) else []
    return [rep.rendezvous_check(p['host'], replica, outcome, pc.result),
            rep.rdma_check(replica, devices, path, p['replica_rdma_required'], pc.result)]


def main():
    module = AnsibleModule(argument_spec=pc.EVALUATE_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    # Host paths the variant mounts are looked up here, on the managed host.
    mount_sources = dict((m.get('source'), os.path.exists(m.get('source')))
                         for m in ((p['variant'] or {}).get('mounts') or []) if m.get('source'))
    report = pc.evaluate(
        p['host'], gpu=p['gpu'], gpu_error=p['gpu_error'], host_facts=p['host_facts'],
        variant=p['variant'], variant_error=p['variant_error'],
        tensor_parallel_size=p['tensor_parallel_size'], podman_min_version=p['podman_min_version'],
        podman_api_key_min_version=p['podman_api_key_min_version'], service_listen=p['service_listen'],
        podman_bad_versions=p['podman_bad_versions'], cdi_dirs=p['cdi_dirs'],
        disk_margin_pct=p['disk_margin_pct'], image_free_bytes=p['image_free_bytes'],
        tmp_free_bytes=p['tmp_free_bytes'], shm_min_mib=p['shm_min_mib'],
        service_ipc_host=p['service_ipc_host'], fabricmanager_unit=p['fabricmanager_unit'],
        fabric_waited_s=p['fabric_waited_s'], mount_sources=mount_sources,
        variant_refusals=p['variant_refusals'], nvml_library_version=p['nvml_library_version'],
        podman_cdi_versions=p['podman_cdi_versions'], service_label_disable=p['service_label_disable'],
        extra_checks=gh.health_checks(p['gpu'], p['host_facts'], p['xid_ignore'], p['xid_since_s'],
                                      p['fabricmanager_unit']) + replica_checks(p),
        nvlink5_remedy=gh.nvlink5_fabric_remedy(p['gpu'], p['host_facts'], p['fabricmanager_unit']))
    module.exit_json(changed=False, summary=pc.summary(report), report=report)


if __name__ == '__main__':
    main()
