#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: image_trial
short_description: Try a new vLLM image on the host, without a GPU, before the running server is stopped
version_added: "0.2.0"
description:
  - Runs the image once with podman (C(--rm), no network, no GPU device, the unit's environment and mounts) and
    asks it what a stop would otherwise find out too late.
  - PyTorch must carry kernels for every compute capability of the host's GPUs. The list comes from
    C(torch._C._cuda_getArchFlags()), which reads the build without touching a GPU
    (C(torch.cuda.get_arch_list()) is empty when no GPU is visible). A cubin of the same major version and a
    lower minor counts (binary compatible); only PTX, or nothing, fails.
  - vLLM's own command line must accept the unit's arguments, read the way the image's entrypoint reads them. C(vllm serve)
    images go through C(vllm.entrypoints.cli.main) with the serve command's dispatch replaced, so vLLM's parser
    and the subcommand's C(validate) run and nothing starts; C(python -m vllm.entrypoints.openai.api_server)
    images through C(make_arg_parser) and C(validate_parsed_serve_args).
  - Returns vLLM's, PyTorch's and CUDA's versions and the arch list for the report.
  - Skipped (C(skipped=true)) when the running unit already uses the same image digest, arguments and
    environment (O(running_image), O(running_args), O(running_env)).
  - Fails, naming the host, the image, what was found and the remedy, when a check fails. Changes nothing on
    the host (the container is removed); runs the same in check mode.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  image:
    description: The new image, pinned by digest (C(repo@sha256:...)); it must already be on the host.
    type: str
    required: true
  args:
    description: The unit's vLLM arguments (what follows the image's entrypoint, as the service role writes them).
    type: list
    elements: str
    required: true
  env:
    description: The unit's environment.
    type: dict
    default: {}
  volumes:
    description: Mounts as podman takes them (C(SRC:DST[:OPTIONS])), for arguments that name files.
    type: list
    elements: str
    default: []
  podman_args:
    description: Extra podman arguments for the trial container.
    type: list
    elements: str
    default: []
  compute_caps:
    description: The host's compute capabilities (C(nvidia_gpu.compute_caps), for example C(["9.0"])).
    type: list
    elements: str
    required: true
  running_image:
    description: The image (by digest) of the unit running now; with O(running_args) (and O(running_env) when
      O(env) is given), the trial is skipped when all equal the new ones.
    type: str
  running_args:
    description: The vLLM arguments of the unit running now.
    type: list
    elements: str
  running_env:
    description: The environment of the unit running now. When O(env) is given and this is not, the
      trial is not skipped (the running environment is unknown).
    type: dict
  podman_path:
    description: The podman binary.
    type: str
    default: podman
  python:
    description: The image's Python, used as the trial's entrypoint.
    type: str
    default: python3
  timeout:
    description: Seconds the trial may take (importing vLLM takes tens of seconds on a large image).
    type: int
    default: 600
notes:
  - Supports check mode, and runs in it, because the trial is read-only and its answer is the preview.
seealso:
  - module: inkling.fleet.quadlet_unit
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
  - inkling.fleet.host_name
'''

EXAMPLES = r'''
- name: Try the new image before the stop
  inkling.fleet.image_trial:
    host: "{{ inventory_hostname }}"
    image: "{{ image_pinned.pinned_reference }}"
    args: "{{ vllm_args }}"
    env: "{{ vllm_env }}"
    compute_caps: "{{ preflight_gpu.compute_caps }}"
    running_image: "{{ running_unit.image | default(omit) }}"
    running_args: "{{ running_unit.args | default(omit) }}"
  register: trial
'''

RETURN = r'''
vllm_version:
  description: vLLM's version in the image.
  returned: when the trial ran
  type: str
  sample: 0.11.0
torch_version:
  description: PyTorch's version in the image.
  returned: when the trial ran
  type: str
  sample: 2.11.0+cu130
cuda_version:
  description: The CUDA version PyTorch was built with.
  returned: when the trial ran
  type: str
  sample: "13.0"
arch_list:
  description: The architectures PyTorch carries kernels for (C(torch._C._cuda_getArchFlags())).
  returned: when the trial ran
  type: list
  elements: str
  sample: [sm_75, sm_80, sm_86, sm_90, sm_100, sm_120]
arch_support:
  description: Per compute capability, how the build runs there (C(native), C(compatible), C(ptx), C(none)) and
    the architecture that matched.
  returned: when the trial ran
  type: dict
  sample: {"9.0": {kind: native, arch: sm_90}}
args_ok:
  description: Whether vLLM's parser accepted the arguments.
  returned: when the trial ran
  type: bool
args_error:
  description: vLLM's parser error (its last line).
  returned: when the parser refused the arguments
  type: str
  sample: "vllm serve: error: unrecognized arguments: --no-such-flag"
failures:
  description: The failed checks (C(check), C(message), C(remedy)).
  returned: always
  type: list
  elements: dict
elapsed_s:
  description: Seconds the trial took.
  returned: when the trial ran
  type: float
'''

import json
import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import image_trial as it
from ansible_collections.inkling.fleet.plugins.module_utils import podman_cli as pc_


def image_entrypoint(module, podman, image):
    rc, out, err = module.run_command([podman, 'image', 'inspect', '--format', '{{json .Config.Entrypoint}}', image])
    if rc != 0:
        return None, (err or out).strip()
    try:
        return json.loads(out.strip() or 'null'), None
    except ValueError:
        return None, 'podman image inspect printed %r' % out.strip()[:200]


def main():
    module = AnsibleModule(argument_spec=it.ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    env = dict((k, str(v)) for k, v in (p['env'] or {}).items())
    running_env = None if p['running_env'] is None else dict((k, str(v)) for k, v in p['running_env'].items())
    if it.should_skip(p['image'], p['args'], p['running_image'], p['running_args'], env, running_env):
        module.exit_json(changed=False, skipped=True, failures=[],
                         msg='image trial skipped on %s: the running unit already uses %s with these arguments'
                             % (p['host'], it.digest_of(p['image'])))
    podman = pc_.podman_binary(module, p['podman_path'])
    entrypoint, error = image_entrypoint(module, podman, p['image'])
    if error:
        module.fail_json(msg='image trial on %s: the image %s is not on the host (%s); the running server was not '
                             'stopped. Remedy: run the image role first (it pulls the pinned image).'
                             % (p['host'], p['image'], error), failures=[])
    name = 'inkling-image-trial-%d' % os.getpid()
    argv = it.podman_argv(podman, p['image'], p['args'], env, p['volumes'], ['--name=' + name] + p['podman_args'],
                          entrypoint, p['python'])
    start = time.time()
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=p['timeout'],
                              env=dict(os.environ, LC_ALL='C'), check=False)
    except subprocess.TimeoutExpired:
        module.run_command([podman, 'rm', '-f', '--ignore', name])
        module.fail_json(msg='image trial on %s: %s did not answer within %d s; the running server was not stopped. '
                             'Remedy: check the image by hand (podman run --rm --network=none %s --help), or raise '
                             'the trial timeout' % (p['host'], p['image'], p['timeout'], p['image']), failures=[])
    rc, out, err = proc.returncode, proc.stdout.decode('utf-8', 'replace'), proc.stderr.decode('utf-8', 'replace')
    elapsed = round(time.time() - start, 1)
    answer = it.parse_output(out)
    verdict = it.judge(p['host'], p['image'], answer, p['compute_caps'], rc, err)
    result = dict(changed=False, failures=verdict['failures'], elapsed_s=elapsed, entrypoint=entrypoint)
    if answer:
        keys = ('vllm_version', 'torch_version', 'cuda_version', 'arch_list', 'args_ok', 'args_error', 'parser')
        result.update(dict((k, answer.get(k)) for k in keys))
        result['arch_support'] = dict(
            (cap, dict(zip(('kind', 'arch'), it.arch_support(cap, answer.get('arch_list'))))) for cap in p['compute_caps'])
    if not verdict['ok']:
        module.fail_json(msg=verdict['message'], **result)
    module.exit_json(msg=verdict['message'], **result)


if __name__ == '__main__':
    main()
