#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: page_cache_warm
short_description: Read a staged model snapshot into the page cache before the old server stops, when memory allows
version_added: "0.2.0"
description:
  - Reads every file of the snapshot C(<cache_dir>/models--ORG--NAME/snapshots/<revision>/) (links resolved, each
    blob once) sequentially, so that the next vLLM start loads its weights from memory instead of disk.
  - 'Decides first, from C(/proc/meminfo): it reads only when C(MemAvailable) minus a margin (O(margin_pct) of
    C(MemTotal), at least O(min_margin_gib)) holds the whole snapshot. Page cache is reclaimable, but filling
    it while the running server needs memory would push that server toward swap or the OOM killer; so the
    module also re-reads C(MemAvailable) after every O(check_every_mib) and stops as soon as it falls to the
    margin.'
  - Changes nothing on the host (changed is always false); returns what was warmed, in how long, or why not.
  - Needs only the Python standard library (plain sequential reads; no vmtouch).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  cache_dir:
    description: The hub cache directory (C(HF_HUB_CACHE)) holding the snapshot.
    type: path
    required: true
  revision:
    description: The 40-hex commit of the snapshot.
    type: str
    required: true
  margin_pct:
    description: Memory left free, in percent of C(MemTotal).
    type: float
    default: 10
  min_margin_gib:
    description: Memory left free at least, in GiB.
    type: float
    default: 4
  check_every_mib:
    description: Re-read C(MemAvailable) after this many MiB read.
    type: int
    default: 1024
  meminfo_path:
    description: Where to read the memory figures (tests point it at a file).
    type: path
    default: /proc/meminfo
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
  - inkling.fleet.hf_cache
'''

EXAMPLES = r'''
- name: Warm the page cache with the new snapshot while the old server serves
  inkling.fleet.page_cache_warm:
    cache_dir: /var/lib/inkling/huggingface/hub
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: 3e06fb836eeadc0f5e33cff534c0dda0e6d5c6bc
  register: warm
'''

RETURN = r'''
warmed:
  description: Whether the whole snapshot was read.
  returned: always
  type: bool
reason:
  description: Why it warmed, why not, or where it stopped.
  returned: always
  type: str
  sample: "not enough memory: MemAvailable 610.0 GiB minus margin 201.3 GiB < snapshot 551.3 GiB"
snapshot_bytes:
  description: Bytes of the snapshot's files (each blob once).
  returned: always
  type: int
bytes_warmed:
  description: Bytes read.
  returned: always
  type: int
seconds:
  description: Seconds the reads took.
  returned: always
  type: float
mem_available_bytes:
  description: MemAvailable before reading.
  returned: always
  type: int
margin_bytes:
  description: Memory kept free.
  returned: always
  type: int
'''

import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache as wc


def meminfo(path):
    with open(path) as fh:
        return wc.parse_meminfo(fh.read())


def snapshot_files(cache_dir, repo_id, revision):
    snap = os.path.join(cache_dir, 'models--' + repo_id.replace('/', '--'), 'snapshots', revision)
    if not os.path.isdir(snap):
        return snap, None
    seen, files = set(), []
    for root, dirs, names in os.walk(snap):
        dirs.sort()
        for name in sorted(names):
            real = os.path.realpath(os.path.join(root, name))
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            files.append((real, os.path.getsize(real)))
    return snap, files


def main():
    module = AnsibleModule(argument_spec=wc.PAGE_CACHE_WARM_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if not re.match(r'^[0-9a-f]{40}$', p['revision']):
        module.fail_json(msg='page_cache_warm: revision %r is not a 40-hex commit' % p['revision'])
    snap, files = snapshot_files(p['cache_dir'], p['repo_id'], p['revision'])
    if files is None:
        module.fail_json(msg='page_cache_warm: no snapshot %s. Remedy: stage it first (inkling.fleet.hf_cache).' % snap)
    total = sum(size for dummy, size in files)
    mem = meminfo(p['meminfo_path'])
    avail, mem_total = mem.get('MemAvailable', 0), mem.get('MemTotal', 0)
    decision = wc.warm_decision(avail, mem_total, total, p['margin_pct'], p['min_margin_gib'])
    result = dict(changed=False, warmed=False, snapshot_bytes=total, bytes_warmed=0, seconds=0.0,
                  mem_available_bytes=avail, margin_bytes=decision['margin_bytes'])
    if not decision['warm'] or module.check_mode:
        result['reason'] = ('skipped: ' + decision['reason']) if not decision['warm'] else 'would warm: ' + decision['reason']
        module.exit_json(**result)
    step = max(1, p['check_every_mib']) * 1024 * 1024
    t0 = time.time()
    done, stopped = wc.read_sequentially(files, step, lambda: meminfo(p['meminfo_path']).get('MemAvailable', 0),
                                         decision['margin_bytes'])
    secs = time.time() - t0
    result.update(bytes_warmed=done, seconds=round(secs, 2), warmed=stopped is None)
    result['reason'] = stopped or 'warmed %d bytes in %.1f s (%.2f GB/s): %s' % (
        done, secs, done / max(secs, 1e-6) / 1e9, decision['reason'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
