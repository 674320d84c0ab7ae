# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Filters building the deployment contract (plugins/module_utils/contract.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.inkling.fleet.plugins.module_utils import contract


def deployment_contract(variant, host, hub_cache_dir=None):
    try:
        return contract.build(variant, host, hub_cache_dir)
    except contract.ContractError as e:
        raise AnsibleFilterError(str(e))


def deployment_pinned(current, image_pinned, snapshot, auth_file=None):
    try:
        return contract.pin(current, image_pinned, snapshot, auth_file)
    except contract.ContractError as e:
        raise AnsibleFilterError(str(e))


class FilterModule(object):
    def filters(self):
        return {'deployment_contract': deployment_contract, 'deployment_pinned': deployment_pinned}
