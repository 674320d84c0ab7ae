# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Checks of a rollout's settings, made once before anything runs on a host.

``check_settings`` takes the ``rollout_*`` values of one host and returns problems;
``check_run`` takes what the controller knows about the run (hosts matched, limit, tags);
``collect`` merges per-host problems into one message per problem, naming the hosts when
not every host has it. The action plugin inkling.fleet.rollout_validate feeds them
(tests/unit/plugins/module_utils/test_rollout_validate.py).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.inkling.fleet.plugins.module_utils.analysis import as_number

HOOK_METHODS = ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')
# Tags the rollout's plays and roles carry (a name, or a name followed by _...). Skipping one
# of them breaks the sequence; skipping others (molecule's notest, a site's own) is harmless.
ROLLOUT_TAGS = ('preflight', 'stage', 'restart', 'hf_cache', 'image', 'service')


def _rollout_tag(tag):
    return any(tag == t or tag.startswith(t + '_') for t in ROLLOUT_TAGS)


def _int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r'^\s*-?\d+\s*$', value):
        return int(value)
    return None


def _num(value):
    # no thousands separators in a variable: "1,5" is not 15
    return as_number(value, thousands=False)


def _bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ('true', 'yes', 'on', '1', 'false', 'no', 'off', '0'):
        return value.strip().lower() in ('true', 'yes', 'on', '1')
    return None


def serial_problem(value):
    """None when ``value`` is a rollout_serial Ansible accepts and that keeps a canary-sized
    first batch meaningful: a whole number >= 1, a percentage 1%-100%, or a list of those."""
    items = value if isinstance(value, list) else [value]
    if not items:
        return 'an empty list'
    for item in items:
        if isinstance(item, str) and item.strip().endswith('%'):
            pct = _int(item.strip()[:-1])
            if pct is None or not 1 <= pct <= 100:
                return 'the batch %r (a percentage must be 1%%-100%%)' % (item,)
            continue
        n = _int(item)
        if n is None:
            return 'the batch %r (not a number of hosts or a percentage)' % (item,)
        if n < 1:
            return ('the batch %r (Ansible reads 0 as "every host at once": no canary, the whole fleet down '
                    'together)' % (item,))
    return None


# name -> (kind, check, expected, remedy)
RULES = (
    ('rollout_max_failed_hosts', 'int', lambda v: v >= 0, 'a whole number >= 0 (0: the first failure halts)'),
    ('rollout_min_healthy_hosts', 'int', lambda v: v >= 0, 'a whole number >= 0'),
    ('rollout_gate_timeout_s', 'int', lambda v: v >= 1, 'a whole number of seconds >= 1 (default 4200, F15)'),
    ('rollout_gate_poll_s', 'num', lambda v: v > 0, 'a number of seconds > 0'),
    ('rollout_gate_latency_budget_s', 'num', lambda v: v > 0, 'a number of seconds > 0'),
    ('rollout_gate_progress_s', 'num', lambda v: v >= 0, 'a number of seconds >= 0 (0: no progress lines)'),
    ('rollout_drain_wait_s', 'int', lambda v: v >= 0, 'a whole number of seconds >= 0'),
    ('rollout_service_port', 'int', lambda v: 1 <= v <= 65535, 'a TCP port, 1-65535'),
    ('rollout_gate_completion', 'bool', lambda v: True, 'true or false'),
    ('rollout_stage_only', 'bool', lambda v: True, 'true or false'),
    ('rollout_cache_seed', 'bool', lambda v: True, 'true or false'),
    ('rollout_cache_prune', 'bool', lambda v: True, 'true or false'),
    ('rollout_prune_revisions', 'bool', lambda v: True, 'true or false'),
    ('rollout_warm_page_cache', 'bool', lambda v: True, 'true or false'),
    ('rollout_warm_margin_pct', 'num', lambda v: 0 <= v < 100, 'a percentage of MemTotal, 0 to below 100'),
    ('rollout_warm_min_margin_gib', 'num', lambda v: v >= 0, 'a number of GiB >= 0'),
    ('rollout_cache_seed_port', 'int', lambda v: 1 <= v <= 65535, 'a TCP port, 1-65535'),
    ('rollout_cache_seed_serve_s', 'int', lambda v: v >= 60, 'a whole number of seconds >= 60'),
    ('rollout_cache_seed_remote_code', 'bool', lambda v: True, 'true or false'),
    ('rollout_cache_seed_allow', 'list', lambda v: all(isinstance(h, str) and h for h in v),
     'a list of host names or addresses ([] for every host of the play)'),
    ('rollout_hook_headers', 'dict', lambda v: all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
     'a dict of header name to string (from vault)'),
    ('rollout_hook_stdin', 'str', lambda v: True, 'a string (from vault)'),
    ('rollout_hook_method', 'str', lambda v: v.upper() in HOOK_METHODS, 'one of ' + ', '.join(HOOK_METHODS)),
    ('rollout_canary_per_variant', 'bool', lambda v: True, 'true or false'),
    ('rollout_analysis', 'bool', lambda v: True, 'true or false (false: no canary analysis)'),
    ('rollout_analysis_ab', 'bool', lambda v: True, 'true or false'),
    ('rollout_analysis_min_agreement', 'num', lambda v: 0 <= v <= 1,
     'a share from 0 to 1 of the greedy answers that must equal the old version\'s (default 0.8)'),
    ('rollout_analysis_max_regression', 'num', lambda v: 0 < v < 1,
     'a fraction above 0 and below 1 (default 0.2: TTFT p50 +20 %, tokens/s -20 %)'),
    ('rollout_analysis_ttft_slack_s', 'num', lambda v: 0 <= v <= 60,
     'seconds from 0 to 60 by which TTFT p50 may always grow (default 0.05)'),
    ('rollout_analysis_load_requests', 'int', lambda v: 0 <= v <= 256,
     'a whole number of concurrent requests from 0 (no load) to 256 (default 16)'),
    ('rollout_analysis_load_max_tokens', 'int', lambda v: 1 <= v <= 4096, 'a whole number of tokens from 1 to 4096'),
    ('rollout_analysis_load_hosts', 'str', lambda v: v in ('canary', 'all'), 'canary or all'),
    ('rollout_analysis_request_timeout_s', 'num', lambda v: v > 0, 'a number of seconds > 0'),
)


SECRET_SETTINGS = ('rollout_hook_headers', 'rollout_hook_stdin')


def check_settings(settings):
    """Problems with the rollout_* values of one host (a dict; absent keys use the defaults)."""
    problems = []
    for name, kind, ok, expected in RULES:
        if name not in settings:
            continue
        value = settings[name]
        parsed = {'int': _int, 'num': _num, 'bool': _bool, 'str': lambda v: v if isinstance(v, str) else None,
                  'list': lambda v: v if isinstance(v, list) else None,
                  'dict': lambda v: v if isinstance(v, dict) else None}[kind](value)
        if parsed is None or not ok(parsed):
            # a credential's value is never shown, only its type
            shown = 'a %s' % type(value).__name__ if name in SECRET_SETTINGS else repr(value)
            problems.append('%s is %s; expected %s' % (name, shown, expected))
    if 'rollout_serial' in settings:
        bad = serial_problem(settings['rollout_serial'])
        if bad:
            problems.append('rollout_serial is %r: %s; expected a number of hosts >= 1, a percentage, or a list of '
                            'those such as [1, "25%%"] (canary first)' % (settings['rollout_serial'], bad))
    return problems


def _pattern_terms(pattern):
    """The names of a host pattern that must each match a host or a group: Ansible splits on ',' (or ':' without
    one); wildcards, regexes (~) and subscripts match by design and are left alone; '!' and '&' are stripped."""
    text = str(pattern or '')
    terms = text.split(',') if ',' in text else text.split(':')
    names = []
    for term in (t.strip() for t in terms):
        term = term.lstrip('!&')
        if not term or term.startswith('~') or any(c in term for c in '*?[]'):
            continue
        names.append(term)
    return names


def pattern_problems(pattern, play_pattern, hosts, groups):
    """Problems that Ansible only warns about: a name in rollout_hosts that matches no host or group (the run would
    silently cover fewer hosts), and a rollout_hosts the plays cannot see (set in the inventory, where the plays'
    host patterns do not look: they see extra vars only)."""
    problems = []
    if play_pattern is not None and str(pattern) != str(play_pattern):
        problems.append('rollout_hosts is %r in the inventory (group_vars or host_vars), but the plays choose their '
                        'hosts before the inventory is read and would run on %r. Pass it on the command line: '
                        '-e rollout_hosts=%s' % (pattern, play_pattern, pattern))
        return problems
    known = set(hosts or []) | set(groups or [])
    unknown = [n for n in _pattern_terms(pattern) if n not in known]
    if unknown:
        one = len(unknown) == 1
        problems.append('rollout_hosts %r names %s, which match%s no host or group of the inventory: Ansible would '
                        'drop %s with a warning and roll out the rest. Check the spelling against '
                        '`ansible-inventory --graph`'
                        % (pattern, ', '.join(repr(n) for n in unknown), 'es' if one else '', 'it' if one else 'them'))
    return problems


def check_run(pattern, matched, play_hosts, limit, run_tags, skip_tags, play_pattern=None, hosts=None, groups=None):
    """Problems with the run as a whole: the host pattern (every name in it matches, the plays see it), --limit,
    --tags. ``play_pattern`` is the pattern the plays use (extra vars only); ``hosts`` and ``groups`` are the
    inventory's names (None: not checked)."""
    problems = []
    if hosts is not None and matched:  # a pattern that matches nothing gets the message below
        problems.extend(pattern_problems(pattern, play_pattern, hosts, groups))
        if problems:
            return problems, [h for h in matched if h in set(play_hosts)]
    targets = [h for h in matched if h in set(play_hosts)]
    if not matched:
        problems.append('rollout_hosts %r matches no host of the inventory; expected a group or pattern of your '
                        'GPU hosts (default inkling_fleet). Check the spelling against `ansible-inventory --graph`'
                        % (pattern,))
    elif not targets:
        problems.append('rollout_hosts %r matches %d host(s), but none is inside --limit %r; nothing would be '
                        'rolled out' % (pattern, len(matched), limit))
    tags = [t for t in (run_tags or ['all']) if t != 'all']
    skip_tags = [t for t in (skip_tags or []) if _rollout_tag(t)]
    if tags or skip_tags:
        problems.append('--tags/--skip-tags (%s) are not supported by the rollout: every play needs what the '
                        'plays before it found (the variant, the staged image and snapshot). Run it without them; '
                        'to stage without restarting add -e rollout_stage_only=true; for preflight alone run '
                        'playbooks/preflight.yml'
                        % ', '.join(['--tags ' + ','.join(tags)] * bool(tags)
                                    + ['--skip-tags ' + ','.join(skip_tags)] * bool(skip_tags)))
    return problems, targets


def collect(per_host):
    """One line per distinct problem, naming the hosts that have it when not all do."""
    hosts = sorted(per_host)
    order = []
    who = {}
    for host in hosts:
        for problem in per_host[host]:
            if problem not in who:
                who[problem] = []
                order.append(problem)
            who[problem].append(host)
    lines = []
    for problem in order:
        if len(who[problem]) == len(hosts):
            lines.append(problem)
        else:
            lines.append('%s (on %s)' % (problem, ', '.join(who[problem])))
    return lines


def analysis_problems(shipped, extra, golden=None):
    """Problems of the golden set the run would ask: the shipped set (or the inventory's
    ``rollout_analysis_golden_set``, ``golden``) with ``rollout_analysis_extra_prompts``."""
    from ansible_collections.inkling.fleet.plugins.module_utils import analysis
    base = shipped if golden is None else golden
    problems = analysis.validate_prompts(base, 'rollout_analysis_golden_set')
    if extra is None:  # an empty YAML key: no extra prompts, as the analysis_prompts filter reads it
        extra = []
    if not isinstance(extra, list):
        problems.append('rollout_analysis_extra_prompts must be a list of prompts, got %s' % type(extra).__name__)
    else:
        problems.extend(analysis.validate_prompts(extra, 'rollout_analysis_extra_prompts'))
    return [p + '. Remedy: fix the entry (docs/rollout.md, "Extending the golden set")' for p in problems]


def analysis_plan(settings, prompts):
    """What the canary analysis will ask, in one line (printed by the first play, also in --check)."""
    on = _bool(settings.get('rollout_analysis', True))
    if on is False:
        return 'Canary analysis: off (rollout_analysis: false): hosts are gated on /health, /v1/models and a completion only'
    by_input = {}
    for p in prompts:
        kind = 'audio' if p.get('audio') else 'image' if p.get('image') else 'text'
        by_input[kind] = by_input.get(kind, 0) + 1
    load = _int(settings.get('rollout_analysis_load_requests', 16)) or 0
    where = settings.get('rollout_analysis_load_hosts', 'canary')
    return ('Canary analysis: %d prompts after each gate (%s; image and audio only where the variant declares them)'
            ', greedy; %s; agreement with the old version >= %s, TTFT p50 and tokens/s within %s'
            % (len(prompts), ', '.join('%d %s' % (n, k) for k, n in sorted(by_input.items())),
               ('load %d x %s tokens on %s' % (load, settings.get('rollout_analysis_load_max_tokens', 128),
                                               'each variant\'s canary, old then new' if where == 'canary' else 'every host'))
               if load else 'no load', settings.get('rollout_analysis_min_agreement', 0.8),
               settings.get('rollout_analysis_max_regression', 0.2)))


def forks_warning(forks, targets, serial):
    """A warning when ``forks`` is below the largest restart batch (None: enough, or unknown). A batch's hosts then
    drain, restart and gate in turns of ``forks``, and the batch takes that many times longer."""
    from ansible_collections.inkling.fleet.plugins.module_utils import replica
    if not forks or not targets or serial_problem(serial if serial is not None else [1, '25%']):
        return None
    _order, sizes = replica.batches(list(targets), {}, serial if serial is not None else [1, '25%'])
    biggest = max(sizes or [0])
    if int(forks) >= biggest:
        return None
    return ('forks is %d, below the largest restart batch (%d hosts): its hosts would drain, restart and gate in '
            'turns of %d. Set forks to at least %d (-f %d, or forks in the [defaults] of your ansible.cfg: the '
            'collection ships none, and Ansible\'s default is 5)' % (int(forks), biggest, int(forks), biggest, biggest))
