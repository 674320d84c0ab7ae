# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.inkling_variant: on the controller, fill in what the task leaves
out (the model, the tensor parallel size, the table, its schema version, the merged override
layers) from the host's variables and the collection's data (plugins/plugin_utils/variant_table.py),
then run the module on the host. The result's ``deployment`` says which model and tensor parallel
size were used, also when the pick is skipped for want of GPU facts (``gpu`` null)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleError
from ansible_collections.inkling.fleet.plugins.module_utils import variant
from ansible_collections.inkling.fleet.plugins.plugin_utils import variant_table
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

FILLED = ('table', 'schema_version', 'overrides')
DEPLOYMENT = ('model', 'tensor_parallel_size')


def _int(value):
    """A whole number from the inventory's text ("8"); anything else as it is (the module names it)."""
    try:
        return int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else value
    except ValueError:
        return value


class ActionModule(InklingAction):
    _supports_check_mode = True

    def run_action(self, result, args, task_vars):
        get = self._getter(task_vars)
        try:
            if any(args.get(name) is None for name in DEPLOYMENT):
                found = variant_table.deployment(task_vars, get)
                for name in DEPLOYMENT:
                    args[name] = found[name] if args.get(name) is None else args[name]
            args['tensor_parallel_size'] = _int(args['tensor_parallel_size'])
            result['deployment'] = dict((name, args[name]) for name in DEPLOYMENT)
            if args.get('gpu') is None:
                result.update(skipped=True, changed=False, msg='no GPU facts: the variant was not picked')
                return result
            missing = [name for name in FILLED if args.get(name) is None]
            if missing:
                found = variant_table.inputs(task_vars, get, layers='overrides' in missing)
                for name, value in zip(FILLED, found):
                    args[name] = value if name in missing else args[name]
        except variant.VariantTableError as exc:
            result.update(failed=True, msg=str(exc), reasons=[], table_errors=exc.errors)
            return result
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
