# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Action plugin of inkling.fleet.rollout_validate: the rollout's settings checked once,
before anything runs on a host. Runs on the controller only; the checks are
plugins/module_utils/rollout_validate.py, plugins/module_utils/variant.py and
plugins/plugin_utils/variant_table.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible import context
from ansible_collections.inkling.fleet.plugins.module_utils import rollout_validate as checks
from ansible_collections.inkling.fleet.plugins.module_utils import variant as variants
from ansible_collections.inkling.fleet.plugins.plugin_utils import collection_data, variant_table
from ansible_collections.inkling.fleet.plugins.plugin_utils.action import InklingAction

ARGUMENT_SPEC = dict(
    pattern=dict(type='str', required=True),
    matched=dict(type='list', elements='str', required=True),
    secrets=dict(type='list', elements='str', default=['image_registry_auth', 'hf_cache_token', 'service_api_key']),
)

ROLLOUT_VARS = [name for name, _k, _c, _e in checks.RULES] + ['rollout_serial']


def _get(hv, name):
    """(present, value, error) of a host variable, templated as the run will template it."""
    try:
        if name not in hv:
            return False, None, None
        return True, hv[name], None
    except Exception as e:  # an undefined variable inside it, a template error  # pylint: disable=broad-except
        return True, None, str(getattr(e, 'message', e)).splitlines()[0]


def _some(hosts, shown=3):
    """The first few of a list of hosts, for a message that must stay one line at any fleet size."""
    more = len(hosts) - shown
    return ', '.join(hosts[:shown]) + (' and %d more' % more if more > 0 else '')


class ActionModule(InklingAction):
    _requires_connection = False
    _supports_check_mode = True
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_action(self, result, args, task_vars):
        play_hosts = task_vars.get('ansible_play_hosts_all') or []
        groups = task_vars.get('groups') or {}
        run_problems, targets = checks.check_run(
            args['pattern'], args['matched'], play_hosts, task_vars.get('ansible_limit'),
            task_vars.get('ansible_run_tags'), task_vars.get('ansible_skip_tags'),
            play_pattern=self._play_pattern(), hosts=groups.get('all', []), groups=list(groups))
        hostvars = task_vars.get('hostvars', {})
        golden = collection_data.golden_set()
        per_host = {}
        old_names = {}
        plan = serial = None
        for host in targets:
            hv = hostvars[host]
            problems = []
            settings = {}
            for name in ROLLOUT_VARS:
                present, value, error = _get(hv, name)
                if error:
                    problems.append('%s cannot be resolved: %s' % (name, error))
                elif present:
                    settings[name] = value
            problems.extend(checks.check_settings(settings))
            for name in args['secrets']:
                _present, _value, error = _get(hv, name)
                if error:
                    problems.append('%s cannot be resolved: %s. Every secret the run needs must resolve before '
                                    'anything runs: define it (ansible-vault) and run with --ask-vault-pass or '
                                    '--vault-password-file' % (name, error))
            names = list(hv)
            problems.extend(self._table_problems(hv, names))
            for old, new in variant_table.deprecated(names):
                old_names.setdefault((old, new), []).append(host)
            prompts, prompt_problems = self._golden_set(hv, golden)
            problems.extend(prompt_problems)
            if plan is None and not prompt_problems:
                plan = checks.analysis_plan(settings, prompts)
                serial = settings.get('rollout_serial')
            per_host[host] = problems
        lines = run_problems + checks.collect(per_host)
        result['changed'] = False
        result['targets'] = targets
        if lines:
            result['failed'] = True
            result['problems'] = lines
            result['msg'] = ('The rollout was not started; nothing ran on any host. %d problem(s):\n- %s'
                             % (len(lines), '\n- '.join(lines)))
        else:
            result['msg'] = 'Settings checked for %d host(s)' % len(targets)
            warning = checks.forks_warning(context.CLIARGS.get('forks'), targets, serial)
            if warning:
                result['warnings'] = [warning]
        if old_names:
            result['deprecations'] = [
                dict(msg='%s (set for %d host(s): %s) is the old name of %s; rename it in the inventory'
                     % (old, len(hosts), _some(hosts), new),
                     version=variant_table.REMOVED_IN, collection_name='inkling.fleet')
                for (old, new), hosts in sorted(old_names.items())]
        result['analysis_plan'] = plan or ''
        return result

    def _play_pattern(self):
        """rollout_hosts as the plays' host patterns see it: from extra vars only (None: unknown here)."""
        try:
            extra = self._task.get_variable_manager().extra_vars
        except AttributeError:
            return None
        return extra.get('rollout_hosts', 'inkling_fleet') if extra is not None else None

    @staticmethod
    def _golden_set(hv, shipped):
        values = {}
        for name in ('rollout_analysis_golden_set', 'rollout_analysis_extra_prompts'):
            present, value, error = _get(hv, name)
            if error:
                return [], ['%s cannot be resolved: %s' % (name, error)]
            if present:
                values[name] = value
        golden = values.get('rollout_analysis_golden_set')
        extra = values.get('rollout_analysis_extra_prompts', [])
        problems = checks.analysis_problems(shipped, extra, golden)
        if problems:
            return [], problems
        from ansible_collections.inkling.fleet.plugins.module_utils import analysis
        return analysis.merge_prompts(shipped if golden is None else golden, extra), []

    @staticmethod
    def _table_problems(hv, names):
        unresolved = []

        def get(name):
            dummy, value, error = _get(hv, name)
            if error:
                unresolved.append('%s cannot be resolved: %s' % (name, error))
                raise variants.VariantTableError(unresolved[-1:])
            return value
        try:
            problems = variant_table.conflicts(names, get)
            merged, dummy = variant_table.effective(names, get)
            deployment = variant_table.deployment(names, get)
        except variants.VariantTableError as e:
            if unresolved:
                return unresolved[:1]
            return ['variant table (with inkling_variant_overrides): %s. Remedy: fix the override (docs/variants.md)'
                    % err for err in e.errors]
        try:
            tp_size = int(deployment['tensor_parallel_size'])
        except (TypeError, ValueError):
            return problems   # the preflight role's argument spec names it
        # remote code runs only from a pinned commit: every entry this host could be given (issue 36, finding 6)
        return problems + ['variant table (with inkling_variant_overrides): %s' % problem
                           for problem in variants.unpinned_candidates(merged, deployment['model'], tp_size)]
