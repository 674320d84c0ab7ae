#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: service_host
short_description: Check that a host holds what the vLLM unit needs, and make its directories, in one call
version_added: "0.2.0"
description:
  - The host side of the C(inkling.fleet.service) role before it writes the unit, in one round trip.
  - Reports whether the image O(image) is in local podman storage (C(podman image exists); the unit never pulls
    at start) and whether the snapshot of O(repo_id) at O(revision) is staged in O(hub_cache_dir)
    (C(models--<org>--<name>/snapshots/<revision>/config.json), a link into C(blobs/) that must lead to a file).
    Both are checked in check mode too.
  - When both are there, creates the compile cache set O(cache_dir) with its O(subdirs) (and O(cache_root) and the
    variant's directory above it), as M(inkling.fleet.compile_cache) O(inkling.fleet.compile_cache#module:state=present)
    does (root-owned, mode 0750, nothing followed inside the set), and O(backup_dir), the directory of the previous
    unit (root-owned, mode 0750, as M(ansible.builtin.file) would make it). When either is missing nothing is written
    and RV(prepared) is false; the caller pulls the image or fails, then calls the module again.
  - In check mode nothing is written and the directories are reported as they would be made, missing image or not.
  - The pure parts are in C(plugins/module_utils/service.py) and C(plugins/module_utils/warm_cache.py).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  image:
    description: The image the unit runs, pinned by digest (C(registry/name@sha256:<64 hex>)).
    type: str
    required: true
  hub_cache_dir:
    description: The host's Hugging Face hub cache (the directory holding C(models--<org>--<name>)).
    type: path
    required: true
  repo_id:
    description: The model's repository, C(org/name).
    type: str
    required: true
  revision:
    description: The snapshot's commit (40 hex).
    type: str
    required: true
  cache_dir:
    description: The unit's compile cache set (C(<cache_root>/<variant>/<digest hex>)).
    type: path
    required: true
  subdirs:
    description: The cache subdirectories of the set.
    type: list
    elements: str
    default: []
  cache_root:
    description: The directory above the variant's directory of O(cache_dir), also created.
    type: path
  backup_dir:
    description: The directory that keeps the previous unit for rollback; not made when unset.
    type: path
  executable:
    description: The podman executable.
    type: str
    default: podman
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
seealso:
  - module: inkling.fleet.compile_cache
  - module: inkling.fleet.quadlet_unit
'''

EXAMPLES = r'''
- name: Check the image and the snapshot, create the caches and the backup directory
  inkling.fleet.service_host:
    image: registry.example.com/vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    hub_cache_dir: /var/lib/inkling/huggingface/hub
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    cache_root: /var/lib/inkling/cache
    cache_dir: /var/lib/inkling/cache/sm90-patched/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    subdirs: [triton, vllm]
    backup_dir: /var/lib/inkling/service
  register: host_check

- name: Pull the image when it is missing
  containers.podman.podman_image:
    name: "{{ image }}"
  when: not host_check.image_present
'''

RETURN = r'''
image_present:
  description: Whether O(image) is in local podman storage.
  returned: always
  type: bool
snapshot_present:
  description: Whether the snapshot's C(config.json) is there (and leads to a file).
  returned: always
  type: bool
snapshot_path:
  description: The C(config.json) looked for.
  returned: always
  type: str
  sample: /var/lib/inkling/huggingface/hub/models--thinkingmachines--Inkling-NVFP4/snapshots/0123456789abcdef0123456789abcdef01234567/config.json
prepared:
  description: Whether the directories were made (or, in check mode, would be); false when the image or the snapshot is missing.
  returned: always
  type: bool
created:
  description: The directories created (in check mode, that would be).
  returned: always
  type: list
  elements: str
fixed:
  description: The directories whose owner or mode was set (in check mode, would be).
  returned: always
  type: list
  elements: str
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.inkling.fleet.plugins.module_utils import nofollow
from ansible_collections.inkling.fleet.plugins.module_utils import service as svc
from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache as wc


def main():
    module = AnsibleModule(argument_spec=svc.SERVICE_HOST_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    result = dict(changed=False, created=[], fixed=[], prepared=False,
                  snapshot_path=svc.snapshot_config_path(p['hub_cache_dir'], p['repo_id'], p['revision']))
    podman = module.get_bin_path(p['executable'], required=True)
    rc, dummy, err = module.run_command([podman, 'image', 'exists', p['image']])
    try:
        result['image_present'] = svc.image_present(rc, err)
    except svc.ServiceHostError as exc:
        module.fail_json(msg='service_host: %s' % exc, **result)
    result['snapshot_present'] = os.path.isfile(result['snapshot_path'])
    if not module.check_mode and not (result['image_present'] and result['snapshot_present']):
        module.exit_json(**result)
    try:
        created, fixed = wc.make_set(p['cache_dir'], p['subdirs'], p['cache_root'], module.check_mode)
        if p['backup_dir']:
            more_created, more_fixed = svc.root_dir(p['backup_dir'], 0o750, module.check_mode)
            created += more_created
            fixed += more_fixed
    except (wc.NotUnderRoot, svc.ServiceHostError) as exc:
        module.fail_json(msg='service_host: %s' % exc, **result)
    except nofollow.LinkRefused as exc:
        module.fail_json(msg='service_host: %s' % exc.strerror, path=exc.path, **result)
    except (IOError, OSError) as exc:
        module.fail_json(msg='service_host: cannot create the directories: %s' % to_native(exc), **result)
    result.update(changed=bool(created or fixed), created=created, fixed=fixed, prepared=True)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
