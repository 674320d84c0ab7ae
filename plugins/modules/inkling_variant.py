#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: inkling_variant
short_description: Select the Inkling serving variant for a GPU host
version_added: "0.1.0"
description:
  - Merges O(overrides) into the variant O(table) by entry name (recursively; lists are replaced),
    validates the result, skips entries with C(enabled=false), and picks the entry that matches the
    model repo id, the host's single compute capability and the tensor parallel size.
  - When several enabled entries match, the one with the highest C(priority) wins; equal priorities
    are a table error. The result's C(reasons) say why the entry was picked.
  - Refuses, naming the host, what was found, what is needed and the remedy, when the host has mixed
    compute capabilities, a compute capability no entry supports (12.0 is known not to work, vLLM
    issue 51405), fewer GPUs than the tensor parallel size, less total GPU memory in the tensor parallel
    group than the model needs, MIG enabled or pending on any GPU, or a driver older than the entry's
    C(min_driver). Every applicable reason is reported.
  - For a host that cannot hold the model alone and that the inventory groups into a replica, selects
    a multi-node entry (C(nodes_per_replica) > 1) and returns the host's place in it; refuses an
    incomplete group or members that differ (see O(replica)).
  - Validates the table itself, for example that every image reference names its registry host.
  - Makes no change on the host; runs the same in check mode.
  - An action plugin runs first, on the controller, and fills in O(model), O(tensor_parallel_size),
    O(table), O(schema_version) and O(overrides) when the task leaves them out, from the host's
    deployment variables (C(inkling_model), C(inkling_tensor_parallel_size), C(inkling_variant_table),
    C(inkling_variant_overrides) and its layers) or the collection's data (C(data/deployment.yml),
    C(data/variants.yml)). It is the same code (plugins/plugin_utils/variant_table.py) that
    C(inkling.fleet.rollout_validate) checks them with. The names of release 0.1.0
    (C(preflight_model), C(preflight_tensor_parallel_size), C(preflight_variant_table),
    C(preflight_variant_overrides) and its layers) are still read, until release 0.3.0.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  gpu:
    description:
      - The GPU facts of the host, as returned by M(inkling.fleet.nvidia_gpu_info) in C(nvidia_gpu).
      - Null (the host has no GPU facts), the action plugin skips the pick and returns only
        RV(deployment).
    type: dict
    required: true
  model:
    description:
      - The Hugging Face repo id of the model, for example C(thinkingmachines/Inkling-NVFP4).
      - When omitted or null, the action plugin fills it in from the host's C(inkling_model), or
        else the collection's, C(data/deployment.yml).
    type: str
  tensor_parallel_size:
    description:
      - The tensor parallel size to serve with.
      - When omitted or null, the host's C(inkling_tensor_parallel_size), or else the collection's.
    type: int
  table:
    description:
      - The variant table, a dict keyed by variant name (see C(docs/variants.md)).
      - When omitted or null, the action plugin fills it in on the controller from the host's
        C(inkling_variant_table), or else the collection's table, C(data/variants.yml).
    type: dict
  schema_version:
    description:
      - The schema version the table was written for. This module reads schema version 1.
      - When omitted or null, the host's C(inkling_variant_table_schema_version), or else the
        collection table's.
    type: int
  overrides:
    description:
      - Entries to add or change, keyed by variant name, merged recursively into O(table).
      - When omitted or null, the action plugin merges the host's C(inkling_variant_overrides)
        and every C(inkling_variant_overrides_<suffix>) variable, in name order (later wins).
        Pass V({}) for no overrides at all.
    type: dict
  host:
    description:
      - The host name used in messages (modules do not see C(inventory_hostname); pass it).
    type: str
    default: this host
  replica:
    description:
      - The multi-node replica the inventory puts this host in (P(inkling.fleet.replica_of#filter) with
        P(inkling.fleet.replica_with_gpus#filter)), or null when it serves alone.
      - A multi-node entry (C(nodes_per_replica) > 1) is selected only when one host cannot hold the
        model and the host is in a replica; then every member must be present with GPU facts and
        identical to the head (GPU model, GPU count, driver), and their number must be the entry's
        C(nodes_per_replica). Hosts that hold the model alone must not be grouped.
    type: dict
    suboptions:
      name:
        description: The replica's name (C(inkling_replica)).
        type: str
        required: true
      members:
        description: Its hosts, the head first.
        type: list
        elements: str
        required: true
      head:
        description: The head (the first member).
        type: str
      head_address:
        description: The address the members reach the head on.
        type: str
      port:
        description: The head's rendezvous port.
        type: int
      gpus:
        description: Member -> its GPU facts in this run (null when it has none).
        type: dict
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
seealso:
  - module: inkling.fleet.nvidia_gpu_info
'''

EXAMPLES = r'''
- name: Read the GPU facts
  inkling.fleet.nvidia_gpu_info:
  register: gpu_info

- name: Select the variant
  inkling.fleet.inkling_variant:
    gpu: "{{ gpu_info.nvidia_gpu }}"
    model: thinkingmachines/Inkling-NVFP4
    tensor_parallel_size: 8
    host: "{{ inventory_hostname }}"
  register: selected

- name: Select from the collection's table with these overrides only (not the host's)
  inkling.fleet.inkling_variant:
    gpu: "{{ gpu_info.nvidia_gpu }}"
    model: thinkingmachines/Inkling-NVFP4
    tensor_parallel_size: 8
    overrides:
      sm90-patched:
        image:
          digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
    host: "{{ inventory_hostname }}"
  register: selected
'''

RETURN = r'''
deployment:
  description:
    - The model and the tensor parallel size the pick was made for (filled in by the action plugin).
  returned: always, unless the host's variables cannot be resolved
  type: dict
  sample: {model: thinkingmachines/Inkling-NVFP4, tensor_parallel_size: 8}
variant:
  description:
    - The selected entry, with every optional key filled (see C(docs/architecture.md)).
  returned: success
  type: dict
  contains:
    name:
      description: The entry name.
      type: str
      sample: sm90-patched
    architecture:
      description: The architecture family it serves.
      type: str
      sample: hopper
    compute_caps:
      description: The compute capabilities it serves.
      type: list
      elements: str
      sample: ["9.0"]
    model:
      description: C(repo_id), C(revision), C(min_total_gpu_memory_mib) and C(size_bytes) (null when unknown).
      type: dict
      sample: {repo_id: thinkingmachines/Inkling-NVFP4, revision: main, min_total_gpu_memory_mib: 666624,
               size_bytes: 591854374368}
    tensor_parallel_size:
      description: The tensor parallel size.
      type: int
      sample: 8
    image:
      description: C(reference) (fully qualified) and C(digest) (null until pinned).
      type: dict
      sample: {reference: "quay.io/vllm/automation-vllm:cuda-29455473553", digest: null}
    vllm_args:
      description: Arguments after C(vllm serve), without --model, --served-model-name, --host and --port.
      type: list
      elements: str
      sample: ["--trust-remote-code", "--tensor-parallel-size", "8"]
    env:
      description: Environment of the container.
      type: dict
      sample: {VLLM_USE_V2_MODEL_RUNNER: "1"}
    mounts:
      description: Extra mounts, each with C(source), C(target) and C(options).
      type: list
      elements: dict
      sample: []
    min_driver:
      description: The lowest NVIDIA driver version the image runs on.
      type: str
      sample: "580.65.06"
    served_model_name:
      description: The name clients use in requests.
      type: str
      sample: inkling
    priority:
      description: The entry's priority.
      type: int
      sample: 10
    description:
      description: One line about the entry, or null.
      type: str
      sample: Hopper with the patched vLLM image of the reference deployment
    notes:
      description: Notes for operators.
      type: list
      elements: str
      sample: []
    sources:
      description: Where the entry's values come from.
      type: list
      elements: str
      sample: []
reasons:
  description: Why this entry was picked, or on failure, every reason the host was refused.
  returned: always
  type: list
  elements: str
  sample: ["web-01: 8 GPU(s), compute capability 9.0, driver 580.159.04; entry sm90-patched matches ..."]
refusals:
  description:
    - On a refusal, the same reasons as C(reasons), each a dict with C(check) (the check of
      M(inkling.fleet.preflight_evaluate) the reason belongs to, C(gpu.count), C(gpu.mig), C(gpu.memory),
      C(driver.version), or C(variant) for reasons about the table), C(message), C(remedy) and C(reason)
      (the text of C(reasons)).
    - When the host's GPU count differs from O(tensor_parallel_size), each also has
      C(tensor_parallel_advice), the tensor parallel size the table offers for these GPUs or a plain
      statement that no setting fixes it (the remedy of the C(gpu.count) check).
  returned: failure when the host is refused
  type: list
  elements: dict
  sample:
    - check: gpu.mig
      message: "MIG is enabled or pending (GPU 0 current=Enabled pending=Enabled); vLLM tensor parallelism needs whole GPUs"
      remedy: "disable MIG (nvidia-smi -i <gpu> -mig 0) with no GPU process running, then reset the GPUs or reboot"
      reason: "web-01: MIG is enabled or pending (GPU 0 current=Enabled pending=Enabled); ... Remedy: ..."
table_errors:
  description: On a table error, each problem found in the table.
  returned: failure
  type: list
  elements: str
  sample: ["entry 'x': image.reference 'vllm/vllm-openai:v0.28.0' is not fully qualified: ... is a short name ..."]
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils.variant import (
    ARGUMENT_SPEC, VariantRefused, VariantTableError, select_variant)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if any(params[name] is None for name in ('model', 'tensor_parallel_size', 'table', 'schema_version')):
        module.fail_json(msg='model, tensor_parallel_size, table and schema_version are required when the module '
                             'runs without its action plugin',
                         reasons=[])
    try:
        variant, reasons = select_variant(
            params['gpu'], params['model'], params['tensor_parallel_size'], params['table'],
            overrides=params['overrides'] or {}, host=params['host'], schema_version=params['schema_version'],
            replica=params['replica'])
    except VariantRefused as exc:
        module.fail_json(msg=str(exc), reasons=exc.reasons, refusals=exc.refusals)
    except VariantTableError as exc:
        module.fail_json(msg=str(exc), reasons=[], table_errors=exc.errors)
    module.exit_json(changed=False, variant=variant, reasons=reasons)


if __name__ == '__main__':
    main()
