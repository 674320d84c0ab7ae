# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The base of inkling.fleet's action plugins: what each one's ``run`` began with, written once.

A plugin sets ``ARGUMENT_SPEC`` (its options, validated as a module's are; None: the task's arguments
as they are) and implements ``run_action(result, args, task_vars)``, which returns the result."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.plugins.action import ActionBase


class InklingAction(ActionBase):
    TRANSFERS_FILES = False
    ARGUMENT_SPEC = None

    def run(self, tmp=None, task_vars=None):
        result = super(InklingAction, self).run(tmp, task_vars)
        del tmp
        if self.ARGUMENT_SPEC is None:
            args = dict(self._task.args)
        else:
            dummy, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        return self.run_action(result, args, task_vars or {})

    def run_action(self, result, args, task_vars):
        raise NotImplementedError('%s does not implement run_action' % type(self).__name__)
