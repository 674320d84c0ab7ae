#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_hub_files
short_description: Fetch the commit of a revision and its file list (sizes and hashes) on the controller
version_added: "0.2.0"
description:
  - Asks the hub (C(GET /api/models/REPO/revision/REVISION?blobs=true), what C(huggingface_hub)'s
    C(model_info(files_metadata=True)) reads) for the commit of O(revision) and every file of it with its size and hash (sha256 of
    the content for LFS files, the git blob sha1 for the small ones), keeps those the allow/ignore patterns
    select, and returns them.
  - 'An action plugin: the request runs on the controller, once (use C(run_once: true)); the C(peer) fan-out of
    the C(inkling.fleet.hf_cache) role hands the result to every receiver (option C(files) of M(inkling.fleet.hf_peer_copy)),
    which checks every byte it receives against it, never against anything a peer serves.'
  - 'The commit a peer fan-out copies is the one returned here (C(revision)), never one a peer reports: for a
    branch or tag it is the commit the hub names now; for a commit, the hub must answer for that commit.'
  - Fails, before anything changes, when the hub cannot be read or answers for another commit, naming the remedy.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  endpoint:
    description: The hub or mirror, as the controller reaches it (C(https://huggingface.co)).
    type: str
    required: true
  revision:
    description: A branch, tag or 40-hex commit.
    type: str
    required: true
  token:
    description: Hub token (gated or private repositories); never logged.
    type: str
    default: ''
  allow_patterns:
    description: Keep only files matching one of these (C(huggingface_hub) semantics).
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Drop files matching one of these.
    type: list
    elements: str
    default: []
  timeout_s:
    description: Seconds to wait for the hub's answer.
    type: int
    default: 60
notes:
  - The decisions are C(hub_files) in C(plugins/module_utils/hf_fanout.py) (unit-tested).
seealso:
  - module: inkling.fleet.hf_peer_copy
extends_documentation_fragment:
  - inkling.fleet.hf_cache
'''

EXAMPLES = r'''
- name: The hub's file list, once, on the controller
  inkling.fleet.hf_hub_files:
    endpoint: https://huggingface.co
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: main
    token: "{{ hf_token }}"
  run_once: true
  register: hub_files
'''

RETURN = r'''
files:
  description: The files, sorted by path, each C(path), C(size), C(etag) (sha256 or git blob sha1) and C(lfs).
  returned: success
  type: list
  elements: dict
revision:
  description: The 40-hex commit the hub named for O(revision).
  returned: success
  type: str
files_total:
  description: Number of files.
  returned: success
  type: int
bytes_total:
  description: Their size in bytes.
  returned: success
  type: int
'''
