# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.inkling_variant: on the controller, fill in what the task leaves
out (the table, its schema version, the merged override layers) from the host's variables and the
collection's table (plugins/plugin_utils/variant_table.py), then run the module on the host."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleError
from ansible_collections.inkling.fleet.plugins.module_utils import variant
from ansible_collections.inkling.fleet.plugins.plugin_utils import variant_table
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

FILLED = ('table', 'schema_version', 'overrides')


class ActionModule(InklingAction):
    _supports_check_mode = True

    def run_action(self, result, args, task_vars):
        missing = [name for name in FILLED if args.get(name) is None]
        if missing:
            try:
                found = variant_table.inputs(task_vars, self._getter(task_vars), layers='overrides' in missing)
            except variant.VariantTableError as exc:
                result.update(failed=True, msg=str(exc), reasons=[], table_errors=exc.errors)
                return result
            for name, value in zip(FILLED, found):
                if name in missing:
                    args[name] = value
        result.update(self._execute_module(module_name='inkling.fleet.inkling_variant', module_args=args,
                                           task_vars=task_vars))
        return result

    def _getter(self, task_vars):
        def get(name):
            try:
                return self._templar.template(task_vars[name])
            except AnsibleError as exc:
                raise variant.VariantTableError(['%s cannot be resolved: %s' % (name, str(exc).splitlines()[0])])
        return get
