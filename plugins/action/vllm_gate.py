# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.vllm_gate: the gate in rounds, one progress line per round.

Each round runs the module on the host for at most ``progress_interval_s`` seconds; the
module returns what it has seen (``state``) and the next round goes on from there, so the
decision (plugins/module_utils/gate.py, GateObserver) is the same as in one long run. The
loop is bounded: the module fails at ``timeout_s`` like a single run would.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.utils.display import Display
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

display = Display()


class ActionModule(InklingAction):
    _supports_check_mode = True

    def run_action(self, result, args, task_vars):
        interval = float(args.pop('progress_interval_s', 30) or 0)
        host = task_vars.get('inventory_hostname', 'this host')
        timeout = args.get('timeout_s', 3600)
        rounds = 0
        state = None
        offset = 0.0
        try:
            while True:
                rounds += 1
                call = dict(args)
                if interval > 0:
                    call.update(round_s=interval, elapsed_offset_s=offset)
                    if state is not None:
                        call['state'] = state
                res = self._execute_module(module_name='inkling.fleet.vllm_gate', module_args=call,
                                           task_vars=task_vars)
                if res.get('decision') != 'continue':
                    break
                state, offset = res.get('state'), float(res.get('elapsed_s') or 0)
                # Bounded: each round either decides or moves elapsed forward; the module fails at timeout_s.
                display.display('%s - gate: %ds of %ss, awaiting %s; last: %s'
                                % (host, offset, timeout, res.get('awaiting'), res.get('last') or 'nothing yet'))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        res['rounds'] = rounds
        result.update(res)
        return result
