#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: nvidia_gpu_info
short_description: Read NVIDIA GPU facts from nvidia-smi
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi --query-gpu=<explicit fields> --format=csv,noheader,nounits) with C(LC_ALL=C) and a
    timeout, and returns per-GPU and per-host facts. The human table of plain C(nvidia-smi) is never parsed.
  - Query fields that an older driver does not know (C(Field "x" is not a valid field to query.)) are
    dropped and the query is retried; they are reported in C(nvidia_gpu.unsupported_fields) and are null.
  - C(N/A) and C([Not Supported]) become null.
  - Also runs C(nvidia-smi --version) (CUDA version), C(nvidia-smi nvlink -s), C(nvidia-smi topo -m) and,
    where it exists, C(lspci -d 10de:) (NVSwitch count). Failures of these are warnings, not errors.
  - Fails with an explanation when nvidia-smi is missing, when NVML reports a driver/library version
    mismatch (matched on the message, not the exit code), when no GPU is found, when the driver is not
    loaded, and when nvidia-smi does not answer within O(timeout).
  - Read-only; runs the same in check mode.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  nvidia_smi_path:
    description:
      - The nvidia-smi binary, as a name looked up on the PATH (and the usual sbin directories) or an
        absolute path.
    type: str
    default: nvidia-smi
  lspci_path:
    description:
      - The lspci binary used to count NVSwitch bridges. When it cannot be found,
        C(nvidia_gpu.nvlink.nvswitch_count) is null.
    type: str
    default: lspci
  timeout:
    description:
      - Seconds each nvidia-smi invocation may take before the module fails.
    type: int
    default: 30
  nvlink:
    description:
      - Whether to collect NVLink and topology facts (C(nvlink -s), C(topo -m), lspci).
    type: bool
    default: true
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
notes:
  - The module only reads. It is safe to run in check mode.
seealso:
  - module: inkling.fleet.inkling_variant
'''

EXAMPLES = r'''
- name: Read the GPU facts
  inkling.fleet.nvidia_gpu_info:
  register: gpu_info

- name: Show the compute capabilities
  ansible.builtin.debug:
    var: gpu_info.nvidia_gpu.compute_caps

- name: Use a driver installed outside the PATH, with a shorter timeout
  inkling.fleet.nvidia_gpu_info:
    nvidia_smi_path: /usr/local/nvidia/bin/nvidia-smi
    timeout: 10
'''

RETURN = r'''
nvidia_gpu:
  description: The GPU facts of the host.
  returned: success
  type: dict
  contains:
    driver_version:
      description: The NVIDIA driver version.
      type: str
      sample: "580.159.04"
    cuda_version:
      description: The CUDA version the driver supports (from C(nvidia-smi --version)); null when not printed.
      type: str
      sample: "13.0"
    gpu_count:
      description: Number of GPUs listed.
      type: int
      sample: 8
    architecture:
      description:
        - Architecture family from the compute capability major (hopper, blackwell, ada, ampere, unknown),
          or C(mixed) when the GPUs belong to several families.
      type: str
      sample: hopper
    compute_caps:
      description: Sorted unique compute capabilities.
      type: list
      elements: str
      sample: ["9.0"]
    memory_total_mib:
      description: Sum of memory.total over the GPUs, in MiB.
      type: int
      sample: 1150168
    unsupported_fields:
      description: Query fields this driver does not know; they are null in C(gpus).
      type: list
      elements: str
      sample: []
    gpus:
      description:
        - One dict per GPU, sorted by index, with the keys C(index), C(uuid), C(name), C(pci_bus_id),
          C(compute_cap), C(compute_cap_major), C(compute_cap_minor), C(memory_total_mib),
          C(persistence_mode), C(mig_mode_current), C(mig_mode_pending), C(ecc_mode_current),
          C(ecc_errors_uncorrected_volatile), C(remapped_rows_correctable), C(remapped_rows_uncorrectable),
          C(remapped_rows_pending), C(remapped_rows_failure), C(gpu_recovery_action) (C(None), C(Reset),
          C(Reboot), C(Drain P2P), C(Drain and Reset)), C(fabric_state), C(fabric_status). Booleans, integers and strings are null when nvidia-smi
          answers C(N/A) or C([Not Supported]).
      type: list
      elements: dict
      sample:
        - index: 0
          uuid: GPU-11111111-2222-3333-4444-555555555501
          name: NVIDIA H200
          pci_bus_id: "00000000:00:06.0"
          compute_cap: "9.0"
          compute_cap_major: 9
          compute_cap_minor: 0
          memory_total_mib: 143771
          persistence_mode: true
          mig_mode_current: false
          mig_mode_pending: false
          ecc_mode_current: true
          ecc_errors_uncorrected_volatile: 0
          remapped_rows_correctable: 0
          remapped_rows_uncorrectable: 0
          remapped_rows_pending: false
          remapped_rows_failure: false
          gpu_recovery_action: "None"
          fabric_state: Completed
          fabric_status: Success
    nvlink:
      description:
        - NVLink and topology facts. C(available) says whether C(nvlink -s) answered; C(gpus) lists per GPU
          C(index), C(uuid), C(links_active), C(links_inactive) and C(link_speed_gbps);
          C(links_active_min) is the smallest active link count over the GPUs; C(topology) is the
          GPU-to-GPU part of C(topo -m) (for example C(GPU0.GPU1 = NV18)); C(all_gpu_pairs_nvlink) is true
          when every GPU pair is joined by NVLink; C(nvlinks_between_gpus_min) is the smallest bonded link
          count over GPU pairs; C(nvswitch_count) counts NVSwitch bridges from C(lspci -d 10de:) (null
          without lspci).
      type: dict
      sample:
        available: true
        links_active_min: 18
        all_gpu_pairs_nvlink: true
        nvlinks_between_gpus_min: 18
        nvswitch_count: 0
        topology: {GPU0: {GPU1: NV18}, GPU1: {GPU0: NV18}}
        gpus:
          - {index: 0, uuid: GPU-11111111-2222-3333-4444-555555555501, links_active: 18,
             links_inactive: 0, link_speed_gbps: 26.562}
error_kind:
  description:
    - On failure, what went wrong, one of C(missing), C(nvml_mismatch), C(no_gpu), C(driver_not_loaded),
      C(nvml_init), C(timeout), C(unsupported_driver), C(parse), C(failed).
  returned: failure
  type: str
  sample: nvml_mismatch
nvml_library_version:
  description: On an NVML mismatch, the user-space NVML library version nvidia-smi printed (null when it printed none).
  returned: failure with error_kind nvml_mismatch
  type: str
  sample: "460.73"
kernel_module_version:
  description: On an NVML mismatch, the version of the loaded kernel module from /proc/driver/nvidia/version.
  returned: failure with error_kind nvml_mismatch
  type: str
  sample: "460.56"
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.nvidia_smi import (
    GPU_INFO_ARGUMENT_SPEC, NvidiaSmiError, collect, kernel_module_version)


def find_binary(module, name, required):
    if os.path.isabs(name):
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        if required:
            raise NvidiaSmiError('missing', '%s does not exist or is not executable' % name)
        return None
    path = module.get_bin_path(name, required=False)
    if path is None and required:
        raise NvidiaSmiError(
            'missing',
            '%s not found on the PATH (%s) or in /sbin, /usr/sbin, /usr/local/sbin. Install the NVIDIA '
            'driver utilities (for example nvidia-utils-<branch> or nvidia-driver-cuda), or set '
            'nvidia_smi_path to the binary.' % (name, os.environ.get('PATH', '')))
    return path


def main():
    module = AnsibleModule(argument_spec=GPU_INFO_ARGUMENT_SPEC, supports_check_mode=True)
    if module.params['timeout'] < 1:
        module.fail_json(msg='timeout must be at least 1 second, got %s' % module.params['timeout'])
    try:
        nvidia_smi = find_binary(module, module.params['nvidia_smi_path'], required=True)
        lspci = None
        if module.params['nvlink']:
            lspci = find_binary(module, module.params['lspci_path'], required=False)
        facts, warnings = collect(nvidia_smi, timeout=module.params['timeout'], lspci=lspci,
                                  nvlink=module.params['nvlink'])
    except NvidiaSmiError as exc:
        extra = exc.as_dict()
        msg = exc.message
        if exc.kind == 'nvml_mismatch':
            loaded = kernel_module_version()
            extra['kernel_module_version'] = loaded
            if loaded:
                msg = '%s Loaded kernel module: %s.' % (msg, loaded)
        module.fail_json(msg=msg, **extra)
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, nvidia_gpu=facts)


if __name__ == '__main__':
    main()
