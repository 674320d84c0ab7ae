# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the rollout: the deployment contract (plugins/module_utils/contract.py), the
restart record (rollout.py) and the remote code pin (variant.py)."""

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


def restart_record(deployment, serving, unit_state=None, unit_args=None, unit_changed=False, resume=''):
    if serving is not None and not isinstance(serving, dict):
        raise AnsibleFilterError('restart_record: the state file read is not a dict: %r' % (serving,))
    return rollout.restart_record(deployment, serving, unit_state, unit_args, bool(unit_changed), resume or '')


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
                'restart_record': restart_record, 'remote_code_problem': remote_code_problem}
