# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the rollout: the deployment contract (plugins/module_utils/contract.py), restart
reasons (rollout.py) and the remote code pin (variant.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.module_utils import contract, rollout
from ansible_collections.inkling.fleet.plugins.module_utils import variant as variant_table


def deployment_contract(variant, host, hub_cache_dir=None):
    try:
        return contract.build(variant, host, hub_cache_dir)
    except contract.ContractError as e:
        raise AnsibleFilterError(str(e))


def deployment_pinned(current, image_pinned, snapshot, auth_file=None, check_mode=False):
    try:
        return contract.pin(current, image_pinned, snapshot, auth_file, bool(check_mode))
    except contract.ContractError as e:
        raise AnsibleFilterError(str(e))


def restart_reasons(after, before, active, unit_changed=False):
    return rollout.restart_reasons(before, after, bool(active), bool(unit_changed))


def remote_code_problem(variant, revision=None):
    """'' or why the variant runs remote code from a revision that is not a 40-hex commit (issue 36, finding 6)."""
    if not isinstance(variant, dict):
        return ''
    entry = dict(variant)
    if revision is not None:
        entry['model'] = dict(entry.get('model') or {}, revision=revision)
    return variant_table.remote_code_problem(entry.get('name') or '?', entry) or ''


class FilterModule(object):
    def filters(self):
        return {'deployment_contract': deployment_contract, 'deployment_pinned': deployment_pinned,
                'restart_reasons': restart_reasons, 'remote_code_problem': remote_code_problem}
