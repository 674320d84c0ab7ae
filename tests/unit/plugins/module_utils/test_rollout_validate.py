# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The rollout's settings checked before anything runs (plugins/module_utils/rollout_validate.py)."""

import os

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import analysis
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
    ({'rollout_cache_seed_remote_code': 'maybe'}, "rollout_cache_seed_remote_code is 'maybe'; expected true or false"),
    ({'rollout_cache_seed_allow': 'lab-h200-01'}, "rollout_cache_seed_allow is 'lab-h200-01'; expected a list"),
    ({'rollout_hook_headers': 'Bearer s3cret'}, 'rollout_hook_headers is a str; expected a dict of header name'),
    ({'rollout_hook_headers': {'Authorization': 5}}, 'rollout_hook_headers is a dict; expected a dict of header'),
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


# -- the canary analysis's settings and golden set -------------------------------------------------

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..')
DATA = os.path.join(REPO, 'data')
ROLE = os.path.join(REPO, 'roles', 'rollout')
REMEDY = '. Remedy: fix the entry (docs/rollout.md, "Extending the golden set")'


def shipped():
    with open(os.path.join(DATA, 'golden_set.yml')) as f:
        return yaml.safe_load(f)['prompts']


def prompt(**over):
    p = {'id': 'site-sum', 'prompt': 'What is 2 plus 2? Answer with the number only.', 'max_tokens': 8,
         'expect': {'number': 4}}
    p.update(over)
    return dict((k, val) for k, val in p.items() if val is not None)


AGREEMENT = "expected a share from 0 to 1 of the greedy answers that must equal the old version's (default 0.8)"
REQUESTS = 'expected a whole number of concurrent requests from 0 (no load) to 256 (default 16)'


@pytest.mark.parametrize('settings,problem', [
    ({'rollout_analysis_min_agreement': 1.5}, 'rollout_analysis_min_agreement is 1.5; ' + AGREEMENT),
    ({'rollout_analysis_min_agreement': -0.1}, 'rollout_analysis_min_agreement is -0.1; ' + AGREEMENT),
    ({'rollout_analysis_min_agreement': '80%'}, "rollout_analysis_min_agreement is '80%'; " + AGREEMENT),
    ({'rollout_analysis_min_agreement': True}, 'rollout_analysis_min_agreement is True; ' + AGREEMENT),
    ({'rollout_analysis_load_requests': -1}, 'rollout_analysis_load_requests is -1; ' + REQUESTS),
    ({'rollout_analysis_load_requests': '-4'}, "rollout_analysis_load_requests is '-4'; " + REQUESTS),
    ({'rollout_analysis_load_requests': 257}, 'rollout_analysis_load_requests is 257; ' + REQUESTS),
    ({'rollout_analysis_load_requests': 8.5}, 'rollout_analysis_load_requests is 8.5; ' + REQUESTS),
    ({'rollout_analysis_load_hosts': 'some'}, "rollout_analysis_load_hosts is 'some'; expected canary or all"),
    # The playbook compares with 'all' as is: 'ALL' would quietly mean canary.
    ({'rollout_analysis_load_hosts': 'ALL'}, "rollout_analysis_load_hosts is 'ALL'; expected canary or all"),
    ({'rollout_analysis_load_hosts': ['all']}, "rollout_analysis_load_hosts is ['all']; expected canary or all"),
    ({'rollout_analysis_load_max_tokens': 0},
     'rollout_analysis_load_max_tokens is 0; expected a whole number of tokens from 1 to 4096'),
    ({'rollout_analysis_max_regression': 1},
     'rollout_analysis_max_regression is 1; expected a fraction above 0 and below 1 (default 0.2: TTFT p50 +20 %, '
     'tokens/s -20 %)'),
    ({'rollout_analysis_max_regression': 0}, 'rollout_analysis_max_regression is 0; expected a fraction above 0'),
    ({'rollout_analysis_request_timeout_s': 0},
     'rollout_analysis_request_timeout_s is 0; expected a number of seconds > 0'),
    ({'rollout_analysis': 'sometimes'},
     "rollout_analysis is 'sometimes'; expected true or false (false: no canary analysis)"),
    ({'rollout_analysis_ab': 2}, 'rollout_analysis_ab is 2; expected true or false'),
    ({'rollout_canary_per_variant': 'maybe'}, "rollout_canary_per_variant is 'maybe'; expected true or false"),
])
def test_bad_analysis_settings_name_the_setting_what_was_found_and_what_to_set(settings, problem):
    problems = v.check_settings(settings)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_good_analysis_settings_pass_at_their_bounds_and_as_strings_from_extra_vars():
    for settings in ({'rollout_analysis_min_agreement': 0, 'rollout_analysis_load_requests': 0},
                     {'rollout_analysis_min_agreement': 1, 'rollout_analysis_load_requests': 256},
                     {'rollout_analysis': 'false', 'rollout_analysis_ab': 'yes', 'rollout_canary_per_variant': True,
                      'rollout_analysis_min_agreement': '0.9', 'rollout_analysis_load_requests': '8',
                      'rollout_analysis_load_max_tokens': '4096', 'rollout_analysis_load_hosts': 'all',
                      'rollout_analysis_max_regression': '0.5', 'rollout_analysis_request_timeout_s': '30'}):
        assert v.check_settings(settings) == [], settings


def test_the_roles_defaults_pass_their_own_checks():
    with open(os.path.join(ROLE, 'defaults', 'main', 'main.yml')) as f:
        defaults = yaml.safe_load(f)
    names = [name for name, _k, _c, _e in v.RULES if name.startswith(('rollout_analysis', 'rollout_canary'))]
    assert len(names) >= 9 and all(name in defaults for name in names)
    assert v.check_settings(dict((name, defaults[name]) for name in names)) == []


def test_the_shipped_golden_set_with_no_extra_prompts_has_no_problem():
    assert v.analysis_problems(shipped(), []) == []


@pytest.mark.parametrize('extra,problem', [
    (['What is 2 plus 2?'], "rollout_analysis_extra_prompts[0] must be a dict with id, prompt, max_tokens and expect, "
                            "got 'What is 2 plus 2?'"),
    ([prompt(id='site sum')], 'rollout_analysis_extra_prompts[0]: id must be 1-64 letters, digits, "_", "." or "-", '
                              "got 'site sum'"),
    ([prompt(max_tokens=None)], "rollout_analysis_extra_prompts 'site-sum': max_tokens must be a whole number from 1 "
                                'to 256 (short, greedy outputs), got None'),
    ([prompt(max_tokens=1000)], "rollout_analysis_extra_prompts 'site-sum': max_tokens must be a whole number from 1 "
                                'to 256 (short, greedy outputs), got 1000'),
    ([prompt(prompt='  ')], "rollout_analysis_extra_prompts 'site-sum': prompt must be a non-empty string"),
    ([prompt(expect={})], "rollout_analysis_extra_prompts 'site-sum': expect must be a dict with at least one of "
                          'number, contains, regex, equals'),
    ([prompt(expect={'number': 'four'})], "rollout_analysis_extra_prompts 'site-sum': expect.number must be a number, "
                                          "got 'four'"),
    ([prompt(expect={'regex': '('})], "rollout_analysis_extra_prompts 'site-sum': expect.regex '(' does not compile"),
    ([prompt(temperature=0)], "rollout_analysis_extra_prompts 'site-sum': unknown key 'temperature' (known: id, "
                              'prompt, max_tokens, expect, image, audio)'),
    ([prompt(image={'media_type': 'image/png', 'data': '@@@'})],
     "rollout_analysis_extra_prompts 'site-sum': image.data is not base64"),
    ([prompt(), prompt(prompt='What is 3 plus 3?', expect={'number': 6})],
     "rollout_analysis_extra_prompts 'site-sum': the id is used twice"),
])
def test_a_malformed_extra_prompt_is_named_with_what_is_wrong_and_the_remedy(extra, problem):
    problems = v.analysis_problems(shipped(), extra)
    assert len(problems) == 1, problems
    assert problems[0].startswith(problem) and problems[0].endswith(REMEDY), problems


def test_extra_prompts_that_are_not_a_list_are_refused():
    problems = v.analysis_problems(shipped(), prompt())
    assert problems == ['rollout_analysis_extra_prompts must be a list of prompts, got dict' + REMEDY]
    # an empty YAML key is no extra prompt, as the rollout's analysis_prompts filter reads it
    assert v.analysis_problems(shipped(), None) == []


def test_an_inventory_golden_set_replaces_the_shipped_one_and_is_checked_under_its_own_name():
    problems = v.analysis_problems(shipped(), [], golden=[prompt(id='only', max_tokens=0)])
    assert problems == ["rollout_analysis_golden_set 'only': max_tokens must be a whole number from 1 to 256 (short, "
                        'greedy outputs), got 0' + REMEDY]
    assert v.analysis_problems([prompt(max_tokens=0)], [], golden=[prompt()]) == []


def test_an_extra_prompt_with_a_shipped_id_is_not_a_problem_it_replaces_that_prompt():
    golden = shipped()
    mine = prompt(id='arithmetic-add', prompt='What is 1000 plus 1? Answer with the number only.',
                  expect={'number': 1001})
    assert v.analysis_problems(golden, [mine]) == []
    merged = analysis.merge_prompts(golden, [mine])
    assert [p['id'] for p in merged] == [p['id'] for p in golden]          # in place, none added
    assert merged[[p['id'] for p in golden].index('arithmetic-add')]['expect'] == {'number': 1001}
    assert v.analysis_plan({}, merged).startswith('Canary analysis: %d prompts after each gate' % len(golden))


def test_the_plan_of_the_defaults_counts_the_prompts_by_input_and_names_the_load_hosts():
    golden = shipped()
    assert len(golden) == 10
    assert v.analysis_plan({}, golden) == (
        'Canary analysis: 10 prompts after each gate (1 audio, 1 image, 8 text; image and audio only where the '
        "variant declares them), greedy; load 16 x 128 tokens on each variant's canary, old then new; agreement "
        'with the old version >= 0.8, TTFT p50 and tokens/s within 0.2')


def test_the_plan_follows_the_settings_and_the_extra_prompts():
    prompts = analysis.merge_prompts(shipped(), [prompt()])
    plan = v.analysis_plan({'rollout_analysis_load_hosts': 'all', 'rollout_analysis_load_requests': '4',
                            'rollout_analysis_load_max_tokens': 64, 'rollout_analysis_min_agreement': 0.9,
                            'rollout_analysis_max_regression': 0.1}, prompts)
    assert plan.startswith('Canary analysis: 11 prompts after each gate (1 audio, 1 image, 9 text; ')
    assert '; load 4 x 64 tokens on every host; agreement with the old version >= 0.9, TTFT p50 and tokens/s ' \
        'within 0.1' in plan
    assert '; no load; ' in v.analysis_plan({'rollout_analysis_load_requests': 0}, prompts)
    for off in (False, 'false', 'no'):
        assert v.analysis_plan({'rollout_analysis': off}, prompts) == (
            'Canary analysis: off (rollout_analysis: false): hosts are gated on /health, /v1/models and a '
            'completion only')


def test_every_name_of_a_pattern_must_match_a_host_or_a_group():
    hosts, groups = ['lab-h200-01', 'lab-h200-02'], ['all', 'inkling_fleet', 'gpu_h200']
    assert v.pattern_problems('lab-h200-01,lab-h200-02', None, hosts, groups) == []
    assert v.pattern_problems('gpu_h200:!lab-h200-02', None, hosts, groups) == []
    assert v.pattern_problems('lab-h200-0*,~lab-.*,gpu_h200[0]', None, hosts, groups) == []
    [problem] = v.pattern_problems('lab-h200-01,lab-h200-2,gpu_h20', None, hosts, groups)
    assert "names 'lab-h200-2', 'gpu_h20', which match no host or group" in problem
    [problem] = v.pattern_problems('gpu_h200', 'inkling_fleet', hosts, groups)
    assert problem.endswith('-e rollout_hosts=gpu_h200')


def test_forks_warning():
    hosts = ['h%02d' % i for i in range(16)]
    assert v.forks_warning(16, hosts, [1, '25%']) is None
    assert 'forks is 2, below the largest restart batch (4 hosts)' in v.forks_warning(2, hosts, [1, '25%'])
    assert v.forks_warning(5, hosts, None) is None          # the default serial: batches of 4
    assert v.forks_warning(5, hosts, 0) is None              # refused elsewhere
