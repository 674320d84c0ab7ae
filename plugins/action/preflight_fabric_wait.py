# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.preflight_fabric_wait: the bounded fabric wait, one line per round.

The loop and its decisions are ``wait_for_fabric`` and friends in
``plugins/module_utils/preflight_checks.py`` (unit-tested with a fake clock); this file only
supplies the real poll (``inkling.fleet.nvidia_gpu_info`` on the host), sleep, clock and display.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import time

from ansible.utils.display import Display
from ansible_collections.inkling.fleet.plugins.module_utils.preflight_checks import wait_for_fabric
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

display = Display()

ARGUMENT_SPEC = dict(
    nvidia_smi_path=dict(type='str', default='nvidia-smi'),
    wait_s=dict(type='int', default=120),
    poll_s=dict(type='int', default=10),
)


class ActionModule(InklingAction):
    _requires_connection = True
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_action(self, result, args, task_vars):
        if args['wait_s'] < 0 or args['poll_s'] < 1:
            result.update(failed=True, msg='wait_s must be >= 0 and poll_s >= 1, got wait_s=%s poll_s=%s'
                          % (args['wait_s'], args['poll_s']))
            return result
        host = task_vars.get('inventory_hostname', 'this host')

        def poll():
            res = self._execute_module(
                module_name='inkling.fleet.nvidia_gpu_info',
                module_args={'nvidia_smi_path': args['nvidia_smi_path'], 'nvlink': False},
                task_vars=task_vars)
            if res.get('failed') or 'nvidia_gpu' not in res:
                return None, 'nvidia-smi failed: %s' % (res.get('msg') or 'no GPU facts')
            return res['nvidia_gpu'], None

        try:
            outcome = wait_for_fabric(poll, time.sleep, time.monotonic, args['wait_s'], args['poll_s'],
                                      show=display.display, host=host)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(outcome)
        result['changed'] = False
        return result
