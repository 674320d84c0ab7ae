# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Options the modules of the hf_cache role share, each described once.

inkling.fleet.hf_cache: O(repo_id) as hf_hub_files, hf_peer_copy and page_cache_warm take it.
inkling.fleet.hf_cache.progress: O(progress_interval_s) of the modules that write a progress file as they go
(hf_download, hf_peer_copy; module_utils/hf_cache.py's Progress)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  repo_id:
    description: Hub repository, C(ORG/NAME).
    type: str
    required: true
'''

    PROGRESS = r'''
options:
  progress_interval_s:
    description: Seconds between progress file updates.
    type: float
    default: 1.0
'''
