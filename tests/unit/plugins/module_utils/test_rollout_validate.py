# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's settings checked before anything runs (plugins/module_utils/rollout_validate.py)."""

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import rollout_validate as v
from ansible_collections.inkling.fleet.plugins.module_utils.variant import is_revision


@pytest.mark.parametrize('serial', [1, '1', '25%', [1, '25%'], [1, 2, 1], '100%', [2]])
def test_good_serials(serial):
    assert v.serial_problem(serial) is None


@pytest.mark.parametrize('serial,why', [
    (0, "the batch 0 (Ansible reads 0 as \"every host at once\""),
    ('abc', "the batch 'abc' (not a number of hosts or a percentage)"),
    ([1, '0%'], "the batch '0%' (a percentage must be 1%-100%)"),
    ('150%', "the batch '150%'"),
    ([], 'an empty list'),
    ([1, None], 'the batch None'),
])
def test_bad_serials(serial, why):
    assert v.serial_problem(serial).startswith(why)


@pytest.mark.parametrize('settings,problem', [
    ({'rollout_max_failed_hosts': 'two'}, "rollout_max_failed_hosts is 'two'; expected a whole number >= 0"),
    ({'rollout_max_failed_hosts': -1}, 'rollout_max_failed_hosts is -1; expected a whole number >= 0'),
    ({'rollout_gate_timeout_s': 0}, 'rollout_gate_timeout_s is 0; expected a whole number of seconds >= 1'),
    ({'rollout_gate_completion': 'maybe'}, "rollout_gate_completion is 'maybe'; expected true or false"),
    ({'rollout_hook_method': 'FETCH'}, "rollout_hook_method is 'FETCH'; expected one of GET"),
    ({'rollout_service_port': 70000}, 'rollout_service_port is 70000; expected a TCP port'),
    ({'rollout_serial': 0}, 'rollout_serial is 0: the batch 0'),
])
def test_bad_settings_name_the_variable_what_was_found_and_what_is_expected(settings, problem):
    problems = v.check_settings(settings)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_good_settings_pass_including_strings_from_extra_vars():
    assert v.check_settings({'rollout_max_failed_hosts': '2', 'rollout_serial': [1, '25%'], 'rollout_gate_poll_s': '0.5',
                             'rollout_gate_completion': 'false', 'rollout_hook_method': 'put'}) == []


def test_a_pattern_matching_nothing_is_refused():
    problems, targets = v.check_run('gpu_h100', [], ['a', 'b'], None, ['all'], [])
    assert targets == [] and problems[0].startswith("rollout_hosts 'gpu_h100' matches no host of the inventory")


def test_a_limit_outside_the_pattern_is_refused():
    problems, targets = v.check_run('gpu_h200', ['a', 'b'], ['c'], 'c', ['all'], [])
    assert problems == ["rollout_hosts 'gpu_h200' matches 2 host(s), but none is inside --limit 'c'; nothing would "
                        "be rolled out"]


def test_limit_inside_the_pattern_targets_only_those():
    problems, targets = v.check_run('inkling_fleet', ['a', 'b', 'c'], ['b'], 'b', ['all'], [])
    assert problems == [] and targets == ['b']


def test_skipping_tags_the_rollout_does_not_use_is_fine():
    problems, _t = v.check_run('x', ['a'], ['a'], None, ['all'], ['molecule-notest', 'notest'])
    assert problems == []


@pytest.mark.parametrize('tags,skip', [(['restart'], []), (['all'], ['stage']), (['all'], ['preflight_fix']),
                                       (['all'], ['image_prune', 'notest'])])
def test_tags_are_refused_with_the_supported_way(tags, skip):
    problems, _t = v.check_run('x', ['a'], ['a'], None, tags, skip)
    assert len(problems) == 1 and 'for preflight alone run playbooks/preflight.yml' in problems[0]


def test_one_message_per_problem_naming_hosts_only_when_not_all():
    lines = v.collect({'a': ['p1', 'p2'], 'b': ['p1'], 'c': ['p1']})
    assert lines == ['p1', 'p2 (on a)']


@pytest.mark.parametrize('rev,ok', [('main', True), ('v1.0', True), ('refs/pr/12', True), ('a' * 40, True),
                                    ('my branch', False), ('a..b', False), ('x:y', False), ('', False),
                                    ('-x', False), ('x.lock', False)])
def test_revision_format(rev, ok):
    assert is_revision(rev) is ok
