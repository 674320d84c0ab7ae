#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: rollout_validate
short_description: Check a rollout's settings once, before anything runs on a host
version_added: "0.2.0"
description:
  - Run once (C(run_once)) by the first play of the rollout. Fails, listing every problem once (naming the
    hosts when not all have it), when
  - a C(rollout_*) variable has the wrong type or range (for example C(rollout_max_failed_hosts=two),
    C(rollout_serial=0), which Ansible reads as every host at once);
  - O(pattern) (C(rollout_hosts)) matches no host of the inventory, or none inside C(--limit);
  - C(--tags) or C(--skip-tags) are given (the plays depend on each other);
  - a secret the run needs (O(secrets)) does not resolve, for example an undefined vault variable;
  - the variant table merged with C(inkling_variant_overrides) is invalid (for example a revision with spaces).
  - An action plugin; it reads the hosts' variables on the controller and connects to no host. The checks are
    C(plugins/module_utils/rollout_validate.py) and C(plugins/module_utils/variant.py).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  pattern:
    description: The rollout's host pattern (C(rollout_hosts)), for messages.
    type: str
    required: true
  matched:
    description: The inventory hosts the pattern matches (C(query('ansible.builtin.inventory_hostnames', pattern))).
    type: list
    elements: str
    required: true
  secrets:
    description: Host variables that must resolve.
    type: list
    elements: str
    default: [image_registry_auth, hf_cache_token, service_api_key]
notes:
  - Supports check mode (it only reads).
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
'''

EXAMPLES = r'''
- name: Check the rollout's settings
  inkling.fleet.rollout_validate:
    pattern: "{{ rollout_hosts }}"
    matched: "{{ query('ansible.builtin.inventory_hostnames', rollout_hosts) }}"
  run_once: true
'''

RETURN = r'''
targets:
  description: The hosts the rollout will act on (matched and inside --limit).
  returned: always
  type: list
  elements: str
problems:
  description: One line per problem.
  returned: failed
  type: list
  elements: str
'''
