# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The canary analysis's decisions (plugins/module_utils/analysis.py): each symptom detector on
the field's garbage (and not on right answers), each answer rule, the golden set's checks, the
comparison with the old version's answers and load, and the verdict's words."""

import os

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import analysis as a

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, '..', '..', '..', '..', 'data', 'golden_set.yml')
# The answers a healthy Inkling would give to the shipped set (the lab's stand-in gives these too).
RIGHT = {'arithmetic-multiply': '391', 'arithmetic-add': '6912', 'fact-capital': 'Paris', 'fact-leap-year': '366',
         'fact-water': 'H2O', 'instruction-uppercase': 'INKLING', 'instruction-primes': '2, 3, 5, 7, 11',
         'instruction-count': '1 2 3 4 5 6 7 8 9 10', 'image-colour': 'Red.', 'audio-digit': '7'}


def golden():
    with open(GOLDEN) as f:
        return yaml.safe_load(f)['prompts']


def ok(text, finish='stop'):
    return {'status': 200, 'content': text, 'finish_reason': finish}


# -- the symptom detectors ---------------------------------------------------------------------

@pytest.mark.parametrize('text,symptom', [
    ('!!!!!!!!!!!!!!!!', 'one character repeated'),            # vLLM #47367
    ('++++++++++++++++', 'one character repeated'),            # sglang #24321
    ('The answer is ????????', 'one character repeated'),
    ('', 'empty content'),
    ('   \n ', 'empty content'),
    (None, 'empty content'),
    ('391\x00\x00\x00', 'null bytes'),                         # vLLM #49070 "null bytes"
    ('Paris\ufffd\ufffd', 'undecodable bytes'),
    ('the the the the the the the the', 'one token repeated'),  # "repeated-token soup"
    ('<unk><unk><unk><unk><unk><unk>', 'one token repeated'),
    ('ParisParisParisParisParisParis', 'one token repeated'),
    ('1111111111111111111111', 'one character repeated'),
])
def test_each_symptom_is_found(text, symptom):
    found = a.symptoms(text, 'stop', 16)
    assert any(f.startswith(symptom) for f in found), found


def test_an_answer_cut_at_max_tokens_with_no_stop_is_a_symptom():
    assert a.symptoms('391 is the product of', 'length', 16) == ['cut off at max_tokens (16) with no stop']
    assert a.symptoms('391', 'stop', 16) == []


@pytest.mark.parametrize('text', list(RIGHT.values()) + [
    '1,000,000', '1000000', 'H₂O', 'Hello, world.', 'ha ha', '2, 3, 5, 7, 11', 'Paris, France', '...', 'aaa bbb'])
def test_right_answers_have_no_symptom(text):
    assert a.symptoms(text, 'stop', 16) == []


# -- the rules -----------------------------------------------------------------------------------

def test_every_shipped_prompt_passes_with_the_right_answer_and_fails_with_garbage():
    prompts = golden()
    assert a.validate_prompts(prompts) == []
    assert sorted(p['id'] for p in prompts) == sorted(RIGHT)
    for p in prompts:
        right = a.judge_prompt(p, ok(RIGHT[p['id']]))
        assert right['passed'], right
        bad = a.judge_prompt(p, ok('!' * 16, 'length'))
        assert not bad['passed'] and bad['failures'] and bad['symptoms'], bad


@pytest.mark.parametrize('expect,text,passes', [
    ({'number': 391}, '391', True),
    ({'number': 391}, 'The answer is 391.', True),
    ({'number': 391}, '17 x 23 = 391', False),          # the first number counts
    ({'number': 6912}, '6,912', True),
    ({'number': 7}, 'seven', False),
    ({'number': 0.5}, '0.5', True),
    ({'contains': 'INKLING'}, 'inkling', True),          # case-insensitive
    ({'contains': ['Paris', 'France']}, 'Paris', False),
    ({'regex': r'(?i)\bred\b'}, 'Reddish', False),
    ({'regex': r'(?i)\bred\b'}, 'Red.', True),
    ({'equals': 'INKLING'}, ' INKLING\n', True),
    ({'equals': 'INKLING'}, 'INKLING!', False),
])
def test_each_rule(expect, text, passes):
    assert (a.rule_failures(expect, text) == []) is passes


def test_a_failure_names_the_prompt_what_was_expected_and_what_came_back_truncated():
    p = {'id': 'fact-capital', 'prompt': 'Capital of France?', 'max_tokens': 16, 'expect': {'regex': 'Paris'}}
    v = a.verdict([a.judge_prompt(p, ok('!' * 200, 'length'))])
    assert not v['passed']
    msg = v['message']
    assert 'prompt fact-capital' in msg and 'a match of /Paris/' in msg
    assert "'" + '!' * 80 + "'... (200 characters)" in msg
    assert '!' * 81 not in msg
    assert 'one character repeated' in msg and 'cut off at max_tokens (16)' in msg


def test_an_error_answer_fails_its_prompt_with_the_status():
    p = golden()[0]
    r = a.judge_prompt(p, {'status': 500, 'error': 'CUDA error: an illegal memory access was encountered'})
    assert not r['passed'] and r['failures'] == ['HTTP 500: CUDA error: an illegal memory access was encountered']
    r = a.judge_prompt(p, {'status': None, 'error': 'timed out'})
    assert r['failures'] == ['HTTP no answer: timed out'] and r['answer'] is None


# -- the golden set's checks (play 0) ----------------------------------------------------------------

@pytest.mark.parametrize('entry,words', [
    ({'prompt': 'x', 'max_tokens': 4, 'expect': {'number': 1}}, 'id must be'),
    ({'id': 'a', 'max_tokens': 4, 'expect': {'number': 1}}, 'prompt must be a non-empty string'),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 1000, 'expect': {'number': 1}}, 'max_tokens must be a whole number from 1'),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 4, 'expect': {}}, 'expect must be a dict with at least one of'),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 4, 'expect': {'regex': '('}}, 'does not compile'),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 4, 'expect': {'number': 'many'}}, 'expect.number must be a number'),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 4, 'expect': {'like': 'x'}}, "unknown key 'like'"),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 4, 'expect': {'number': 1}, 'temp': 1}, "unknown key 'temp'"),
    ({'id': 'a', 'prompt': 'x', 'max_tokens': 4, 'expect': {'number': 1},
      'image': {'media_type': 'image/png', 'data': 'not base64!'}}, 'image.data is not base64'),
])
def test_a_bad_entry_is_named_with_what_is_wrong(entry, words):
    problems = a.validate_prompts([entry], 'rollout_analysis_extra_prompts')
    assert any(words in p and p.startswith('rollout_analysis_extra_prompts') for p in problems), problems


def test_a_duplicate_id_is_refused_and_the_inventory_replaces_or_extends_the_shipped_set():
    shipped = golden()
    assert any('used twice' in p for p in a.validate_prompts(shipped + [dict(shipped[0])]))
    mine = {'id': 'fact-capital', 'prompt': 'Capital of Italy? One word.', 'max_tokens': 8, 'expect': {'contains': 'Rome'}}
    extra = {'id': 'local-1', 'prompt': 'What is 12 plus 30?', 'max_tokens': 8, 'expect': {'number': 42}}
    merged = a.merge_prompts(shipped, [mine, extra])
    assert [p['id'] for p in merged] == [p['id'] for p in shipped] + ['local-1']
    assert merged[[p['id'] for p in merged].index('fact-capital')]['expect'] == {'contains': 'Rome'}


def ids(prompts):
    return [p['id'] for p in prompts]


def test_prompts_are_asked_only_for_the_inputs_the_variant_declares():
    assert 'audio-digit' not in ids(a.select(golden(), ['text', 'image']))
    assert 'image-colour' in ids(a.select(golden(), ['text', 'image']))
    assert 'audio-digit' in ids(a.select(golden(), ['text', 'image', 'audio']))
    assert ids(a.select(golden(), ['text'])) == [i for i in ids(golden()) if i not in ('image-colour', 'audio-digit')]


def test_requests_are_greedy_short_and_carry_the_image_as_a_data_url():
    p = [q for q in golden() if q['id'] == 'image-colour'][0]
    req = a.chat_request(p, 'inkling')
    assert req['temperature'] == 0 and req['max_tokens'] == 16 and req['seed'] == 0
    assert req['chat_template_kwargs'] == {'reasoning_effort': 'none'}
    parts = req['messages'][0]['content']
    assert parts[0] == {'type': 'text', 'text': p['prompt']}
    url = parts[1]['image_url']['url']
    assert url.startswith('data:image/png;base64,iVBORw0KGgo') and ' ' not in url
    audio = a.chat_request([q for q in golden() if q['id'] == 'audio-digit'][0], 'inkling')
    assert audio['messages'][0]['content'][1]['input_audio']['format'] == 'wav'
    load = a.load_request('inkling', 128, 3)
    assert load['ignore_eos'] and load['stream'] and load['max_tokens'] == 128


# -- comparison with the old version ---------------------------------------------------------------

def results(answers, prompts=None):
    prompts = prompts or golden()
    return [a.judge_prompt(p, ok(answers[p['id']])) for p in prompts if p['id'] in answers]


def test_agreement_counts_the_greedy_answers_equal_to_the_old_ones():
    old = dict(RIGHT)
    share, common, differ = a.agreement(dict(RIGHT, **{'fact-capital': 'Paris, France'}), old)
    assert share == 0.9 and len(common) == 10 and differ == ['fact-capital']
    assert a.agreement(RIGHT, {})[0] is None
    assert a.agreement({'x': 'a  b'}, {'x': 'a b\n'})[0] == 1.0   # whitespace does not count


def test_drift_passes_every_rule_but_fails_the_agreement():
    drift = dict(RIGHT, **{'fact-capital': 'Paris, France', 'fact-water': 'H₂O', 'instruction-primes': '2,3,5,7,11',
                           'instruction-count': '1 2 3 4 5 6 7 8 9 10.'})
    baseline = {'answers': RIGHT, 'source': 'old'}
    v = a.verdict(results(drift), baseline=baseline, min_agreement=0.8)
    assert v['rule_passed'] == 10 and not v['passed']
    assert v['agreement'] == 0.6 and "4 of 10 greedy answers differ from the old version's" in v['message']
    assert a.verdict(results(drift), baseline=baseline, min_agreement=0.6)['passed']
    assert a.verdict(results(RIGHT), baseline=baseline)['passed']


def test_no_baseline_is_judged_by_the_rules_alone():
    v = a.verdict(results(RIGHT))
    assert v['passed'] and v['agreement'] is None and 'no old answers to compare (none)' in v['message']


def perf(ttft, tps, errors=0, n=16, tokens=128):
    return {'requests': n, 'concurrency': n, 'max_tokens': tokens, 'errors': errors, 'ttft_p50_s': ttft,
            'output_tokens_per_s': tps, 'first_error': 'HTTP 500: CUDA error' if errors else None}


@pytest.mark.parametrize('new,fails', [
    (perf(0.10, 500.0), []),
    (perf(0.119, 401.0), []),                       # within 20 %
    (perf(0.13, 500.0), ['TTFT p50']),
    (perf(0.10, 250.0), ['tokens/s']),             # "slow": tokens/s halved
    (perf(0.25, 250.0), ['TTFT p50', 'tokens/s']),
    (perf(0.10, 500.0, errors=3), ['load requests failed']),
])
def test_the_load_is_compared_with_the_old_figures(new, fails):
    got = a.compare_perf(new, perf(0.10, 500.0), 0.2)
    assert len(got) == len(fails) and all(f in g for f, g in zip(fails, got)), got


def test_loads_of_another_shape_are_not_compared_but_errors_always_fail():
    assert a.compare_perf(perf(0.5, 50.0, n=8), perf(0.1, 500.0), 0.2) == []
    assert a.compare_perf(perf(0.1, 500.0, errors=1), None, 0.2) == ['1 of 16 load requests failed (HTTP 500: CUDA error)']


def test_load_summary_p50_tokens_per_second_and_errors():
    reqs = [{'status': 200, 'ttft_s': t, 'tokens': 128} for t in (0.1, 0.2, 0.3, 0.4)] + \
           [{'status': 500, 'error': 'CUDA error: an illegal memory access was encountered'}]
    s = a.load_summary(reqs, 2.0, 5, 128)
    assert s['ttft_p50_s'] == 0.25 and s['output_tokens_per_s'] == 256.0 and s['errors'] == 1
    assert s['first_error'] == 'HTTP 500: CUDA error: an illegal memory access was encountered'


def test_the_baseline_is_the_old_version_asked_live_else_its_recorded_reference():
    live = a.verdict(results(RIGHT), perf(0.1, 500.0))
    b = a.choose_baseline(live, {'answers': {'x': 'y'}, 'variant': 'sm90'}, 'sm90')
    assert b['answers'] == RIGHT and b['perf']['ttft_p50_s'] == 0.1 and 'just before its stop' in b['source']
    broken = a.verdict(results(dict(RIGHT, **{'fact-capital': '!!!!!!!!!!!!'})))
    rec = a.reference(live, 'sm90', 'sha256:' + 'b' * 64)
    b = a.choose_baseline(broken, rec, 'sm90')
    assert b['answers'] == RIGHT and 'last passed analysis (sha256:bbbbbbbbbbbb)' in b['source']
    assert a.choose_baseline(None, rec, 'sm100') is None          # another variant's figures are not the same load
    assert a.choose_baseline(None, {}, 'sm90') is None
    assert a.reference(broken) == {}


def test_the_journal_copy_keeps_every_verdict_and_drops_full_answers():
    v = a.verdict(results(RIGHT), perf(0.1, 500.0))
    c = a.compact(v)
    assert c['passed'] and len(c['prompts']) == 10 and 'answer' not in c['prompts'][0]
    assert c['perf']['output_tokens_per_s'] == 500.0
    # a failed task's result (ansible_failed_result) carries the module's invocation: never kept
    failed = dict(v, invocation={'module_args': {'api_key': 'sk-secret'}}, changed=False, failed=True, msg='x')
    kept = a.compact(failed)
    assert 'invocation' not in kept and 'sk-secret' not in repr(kept) and kept['passed'] == v['passed']


def test_a_ttft_change_within_the_slack_is_noise_not_a_regression():
    """0.059 s -> 0.094 s (+59 %) was measured for the same build on a loaded 2-core machine."""
    old = {'requests': 16, 'concurrency': 16, 'max_tokens': 128, 'errors': 0, 'ttft_p50_s': 0.059,
           'output_tokens_per_s': 50.0}
    new = dict(old, ttft_p50_s=0.094)
    assert a.compare_perf(new, old, 0.2) and 'TTFT p50' in a.compare_perf(new, old, 0.2)[0]
    assert a.compare_perf(new, old, 0.2, ttft_slack_s=0.05) == []
    slow = dict(old, ttft_p50_s=0.2)
    assert 'TTFT p50 0.200 s' in a.compare_perf(slow, old, 0.2, ttft_slack_s=0.05)[0]
    # real-host TTFTs: the fraction decides, the slack is small beside it
    assert a.compare_perf(dict(old, ttft_p50_s=0.5), dict(old, ttft_p50_s=0.4), 0.2, 0.05)
