#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: preflight_recheck
short_description: Re-check a GPU host's health right before it is drained (read-only, fast)
version_added: "0.2.0"
description:
  - Gathers and judges, in one call and in a few seconds, what can go wrong on a host between its preflight
    and its drain; changes nothing.
  - Checks the driver (nvidia-smi answers, the loaded kernel module equals the driver), the GPU count, MIG
    (now and pending), uncorrectable ECC errors, pending or failed row remapping, the GPUs' recovery action,
    Xid events since boot that mean a bad GPU (by GPU index and PCI bus id), the fabric manager (installed,
    active, of the driver's version on NVSwitch and NVLink5 boards), the fabric state and, on NVLink5 HGX
    boards, C(ib_umad) and NVLSM.
  - The checks and their messages are those of the preflight role (M(inkling.fleet.preflight_evaluate)), so a
    host that fails here fails with the message preflight would give.
  - Never fails itself unless O(fail) is true; by default the caller decides with C(report.ok).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  tensor_parallel_size:
    description: GPUs the model is served on; the host must still have exactly this many.
    type: int
    default: 8
  nvidia_smi_path:
    description: The nvidia-smi binary.
    type: str
    default: nvidia-smi
  xid_ignore:
    description: Xid codes never reported.
    type: list
    elements: int
    default: []
  xid_since_s:
    description: Xid events logged earlier than this many seconds after boot are not reported.
    type: float
    default: 0
  timeout:
    description: Seconds each nvidia-smi call may take.
    type: int
    default: 30
  fail:
    description: Fail the task with the summary when a check fails (otherwise only C(report.ok) says so).
    type: bool
    default: false
seealso:
  - module: inkling.fleet.preflight_evaluate
  - module: inkling.fleet.nvidia_gpu_info
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
  - inkling.fleet.gpu_host
  - inkling.fleet.host_name
'''

EXAMPLES = r'''
- name: Re-check the host right before its drain
  inkling.fleet.preflight_recheck:
    host: "{{ inventory_hostname }}"
    tensor_parallel_size: 8
  register: recheck

- name: Keep serving the old version when the host is no longer healthy
  ansible.builtin.fail:
    msg: "{{ recheck.summary }}"
  when: not recheck.report.ok
'''

RETURN = r'''
report:
  description: The result of every check (the same shape as the preflight report).
  returned: always
  type: dict
  contains:
    ok:
      description: True when no check of level C(error) failed.
      type: bool
    checks:
      description: Every check, each with C(check), C(ok), C(level), C(found), C(expected), C(remedy), C(message).
      type: list
      elements: dict
    failures:
      description: The failed checks of level C(error).
      type: list
      elements: dict
    warnings:
      description: The failed checks of level C(warning).
      type: list
      elements: dict
    gpu:
      description: The GPU facts read (as M(inkling.fleet.nvidia_gpu_info) returns them, without NVLink), null
        when nvidia-smi failed.
      type: dict
summary:
  description: One message naming the host and every failure with its remedy (empty when all passed).
  returned: always
  type: str
  sample: |-
    gpu-node-01: re-check before the drain failed (1 problem); the host is not drained or stopped:
    - [fabric.manager] nvidia-fabricmanager is inactive on an NVSwitch system (4 NVSwitch devices); ...
elapsed_s:
  description: Seconds the re-check took.
  returned: always
  type: float
'''

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import gpu_health as gh
from ansible_collections.inkling.fleet.plugins.module_utils import host_probe as hp
from ansible_collections.inkling.fleet.plugins.module_utils import nvidia_smi
from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc


def gpu_facts(module):
    """(facts, error message, NVML library version on a mismatch)."""
    p = module.params
    binary = p['nvidia_smi_path']
    if '/' not in binary:
        binary = module.get_bin_path(binary)
    if not binary:
        return None, '%s not found on the PATH' % p['nvidia_smi_path'], None
    try:
        facts, _warnings = nvidia_smi.collect(binary, timeout=p['timeout'], nvlink=False)
    except nvidia_smi.NvidiaSmiError as exc:
        return None, exc.message, exc.extra.get('nvml_library_version')
    return facts, None, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type='str', required=True),
            tensor_parallel_size=dict(type='int', default=8),
            nvidia_smi_path=dict(type='str', default='nvidia-smi'),
            driver_version_file=dict(type='path', default='/proc/driver/nvidia/version'),
            fabricmanager_unit=dict(type='str', default='nvidia-fabricmanager'),
            fabricmanager_path=dict(type='str', default='nv-fabricmanager'),
            lspci_path=dict(type='str', default='lspci'),
            kernel_modules_file=dict(type='path', default='/proc/modules'),
            xid_ignore=dict(type='list', elements='int', default=[]),
            xid_since_s=dict(type='float', default=0),
            timeout=dict(type='int', default=30),
            fail=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    start = time.time()
    gpu, gpu_error, nvml_version = gpu_facts(module)
    facts = {
        'kernel_module_version': pc.parse_driver_version_file(hp.read_text(p['driver_version_file'])),
        'fabricmanager': hp.fabricmanager_facts(module, p['fabricmanager_unit'], p['fabricmanager_path']),
        'kernel_log': hp.kernel_log(module),
        'nvlink5': hp.nvlink5_facts(module, p['kernel_modules_file']),
    }
    facts['nvswitch_count'], _lines, _err = hp.nvswitch_facts(module, p['lspci_path'])
    report = gh.recheck(p['host'], gpu, gpu_error, facts, p['tensor_parallel_size'], p['xid_ignore'],
                        p['xid_since_s'], p['fabricmanager_unit'], nvml_version)
    report['gpu'] = gpu
    summary = gh.recheck_summary(report) if not report['ok'] else ''
    elapsed = round(time.time() - start, 2)
    if p['fail'] and not report['ok']:
        module.fail_json(msg=summary, report=report, summary=summary, elapsed_s=elapsed)
    module.exit_json(changed=False, report=report, summary=summary, elapsed_s=elapsed)


if __name__ == '__main__':
    main()
