#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_prune
short_description: Remove the model revisions of a hub cache that a host neither serves nor would roll back to
version_added: "0.2.0"
description:
  - Keeps the commits in O(keep) of one repository's folder in a Hugging Face hub cache and removes the other
    revisions, as the C(inkling.fleet.image) role keeps only the images it may need. Each revision of Inkling is
    about 592 GB, so a host that kept every revision it ever served would fill its disk after a few upgrades.
  - Removes the snapshot folders of the other commits (only folders named by a 40-hex commit), the refs (branches,
    tags) that name one of them, their manifests, markers and plans under C(.inkling/), and every blob that no kept
    snapshot uses (by its links or by its manifest). Partial files (C(.incomplete)), other repositories and
    anything else are left alone.
  - 'Nothing is followed: links are read with C(readlink), never entered, and a snapshot folder that is a link is
    left alone.'
  - 'Safe to interrupt: refs and markers go first, so a revision stops counting as complete before its files go;
    a killed run is finished by the next one.'
  - Fails, before anything changes, when O(keep) names no 40-hex commit (that would remove every revision).
  - In check mode, reports what would be removed and changes nothing (a preview with C(--check --diff)).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  cache_dir:
    description: The hub cache (C(HF_HUB_CACHE)).
    type: path
    required: true
  repo_id:
    description: The repository (C(ORG/NAME)) whose revisions are pruned.
    type: str
    required: true
  keep:
    description:
      - The commits to keep, for the rollout the one the host serves and its rollback target. Entries that are not
        40-hex commits (an empty string, a branch) are ignored.
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - inkling.fleet.attributes
  - inkling.fleet.attributes.check_full_diff_full
'''

EXAMPLES = r'''
- name: Keep the served revision and the rollback target only
  inkling.fleet.hf_prune:
    cache_dir: /var/lib/inkling/huggingface/hub
    repo_id: thinkingmachines/Inkling-NVFP4
    keep:
      - 0123456789abcdef0123456789abcdef01234567
      - 89abcdef0123456789abcdef0123456789abcdef
'''

RETURN = r'''
kept:
  description: The commits kept (those of O(keep) that are commits).
  returned: always
  type: list
  elements: str
removed_revisions:
  description: The commits whose snapshots were removed (or would be, in check mode).
  returned: always
  type: list
  elements: str
removed_blobs:
  description: How many blobs were removed (or would be).
  returned: always
  type: int
freed_bytes:
  description: The bytes of the blobs removed (or that would be).
  returned: always
  type: int
msg:
  description: What was removed, in one line.
  returned: always
  type: str
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc


class Pruner(object):
    """Plans and applies the pruning of one repository's folder (module_utils/hf_cache.py decides)."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.rdir = hc.repo_dir(self.p['cache_dir'], self.p['repo_id'])

    def run(self):
        host = os.uname()[1]
        try:
            plan = hc.prune_plan(self.rdir, self.p['keep'])
        except hc.HfCacheError as exc:
            self.module.fail_json(msg='%s: %s. Remedy: pass the served commit (and the rollback target) in keep.'
                                      % (host, exc))
        changed = bool(plan['revisions'] or plan['refs'] or plan['state_files'] or plan['blobs'])
        if changed and not self.module.check_mode:
            try:
                hc.prune_apply(self.rdir, plan)
            except OSError as exc:
                self.module.fail_json(msg='%s: pruning %s stopped at %s: %s. What is left is removed by the next '
                                          'run.' % (host, self.rdir, exc.filename, exc.strerror))
        verb = 'would remove' if self.module.check_mode else 'removed'
        msg = ('%s %d revision(s) %s, %d blob(s), %s; kept %s' % (
            verb, len(plan['revisions']), ', '.join(c[:12] for c in plan['revisions']) or '-', len(plan['blobs']),
            hc.human_bytes(plan['bytes']), ', '.join(c[:12] for c in plan['kept']))
            if changed else 'nothing to remove; kept %s' % ', '.join(c[:12] for c in plan['kept']))
        result = dict(changed=changed, kept=plan['kept'], removed_revisions=plan['revisions'],
                      removed_blobs=len(plan['blobs']), freed_bytes=plan['bytes'], msg=msg)
        if self.module._diff and changed:
            result['diff'] = {'before': '\n'.join(sorted(plan['kept'] + plan['revisions'])) + '\n',
                              'after': '\n'.join(plan['kept']) + '\n',
                              'before_header': '%s revisions' % self.rdir, 'after_header': '%s revisions' % self.rdir}
        self.module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=hc.PRUNE_ARGUMENT_SPEC, supports_check_mode=True)
    Pruner(module).run()


if __name__ == '__main__':
    main()
