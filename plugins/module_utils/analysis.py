# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Canary analysis: is a server that answers 200 also answering *right*, and as fast as before?

The field's most common failure of an NVFP4 mixture-of-experts model on Hopper fallback
kernels is a server that passes every health check and answers garbage (docs/field-failures.md,
F19-F21). After a restart passed its gate, the rollout asks a golden set of prompts with greedy
decoding and short outputs (``inkling.fleet.vllm_analysis``) and judges the answers here:

* each answer by its own rule (``expect``: number, contains, regex, equals);
* every answer by detectors of the field's symptoms (``symptoms``): empty content, null bytes,
  one character repeated, one token repeated, cut off at max_tokens with no stop;
* the answers against the old version's answers to the same set (``agreement``): asked of the
  canary itself just before its stop, or recorded when the old version passed its own analysis;
* a short bounded load's TTFT p50 and output tokens/s against the old version's figures for
  the same load (``compare_perf``), and any request that errors under it.

No I/O here: the module does the HTTP, these functions decide
(tests/unit/plugins/module_utils/test_analysis.py).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import base64
import binascii
import re

MODALITIES = ('text', 'image', 'audio')
DEFAULT_MODALITIES = MODALITIES
EXPECT_KEYS = ('number', 'contains', 'regex', 'equals')
PROMPT_KEYS = ('id', 'prompt', 'max_tokens', 'expect', 'image', 'audio')
ID_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$')
MAX_TOKENS_LIMIT = 256
NUMBER_RE = re.compile(r'-?\d[\d,]*(?:\.\d+)?')
SHOW = 80

# Symptom detectors: a run of one non-digit character (vLLM #47367 "!!!!!!!!", sglang #24321
# "++++++++"), a long run of one digit, and one short token repeated back to back (the
# "repeated-token soup" of vLLM #49070).
CHAR_RUN_RE = re.compile(r'([^\s\d])\1{7,}')
DIGIT_RUN_RE = re.compile(r'(\d)\1{15,}')
TOKEN_RUN_RE = re.compile(r'(\S.{0,15}?)\1{4,}', re.S)


class PromptError(ValueError):
    pass


def show(text, limit=SHOW):
    """``text`` for a message: repr-quoted (null bytes visible), cut at ``limit`` characters."""
    if text is None:
        return 'no content'
    cut = text if len(text) <= limit else text[:limit]
    out = repr(cut)
    if len(text) > limit:
        out += '... (%d characters)' % len(text)
    return out


def normalise(text):
    return ' '.join((text or '').split())


def modality(prompt):
    if prompt.get('audio'):
        return 'audio'
    if prompt.get('image'):
        return 'image'
    return 'text'


def _b64_ok(data):
    try:
        base64.b64decode(''.join(str(data).split()), validate=True)
        return True
    except (binascii.Error, ValueError, TypeError):
        return False


def as_number(value, thousands=True):
    """``value`` as a float, or None (a bool is not a number). From text, with ``thousands`` its commas
    are dropped first (an answer's "6,912")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).replace(',', '') if thousands else str(value)
    try:
        return float(text.strip())
    except ValueError:
        return None


def validate_prompts(prompts, where='rollout_analysis_golden_set'):
    """Problems of a list of golden-set entries (empty: valid), one line each, naming the entry."""
    if not isinstance(prompts, list):
        return ['%s must be a list of prompts, got %s' % (where, type(prompts).__name__)]
    problems = []
    seen = set()
    for index, p in enumerate(prompts):
        name = '%s[%d]' % (where, index)
        if not isinstance(p, dict):
            problems.append('%s must be a dict with id, prompt, max_tokens and expect, got %r' % (name, p))
            continue
        pid = p.get('id')
        if not isinstance(pid, str) or not ID_RE.match(pid):
            problems.append('%s: id must be 1-64 letters, digits, "_", "." or "-", got %r' % (name, pid))
        else:
            name = '%s %r' % (where, pid)
            if pid in seen:
                problems.append('%s: the id is used twice' % name)
            seen.add(pid)
        for key in sorted(set(p) - set(PROMPT_KEYS)):
            problems.append('%s: unknown key %r (known: %s)' % (name, key, ', '.join(PROMPT_KEYS)))
        if not isinstance(p.get('prompt'), str) or not p.get('prompt', '').strip():
            problems.append('%s: prompt must be a non-empty string' % name)
        mt = p.get('max_tokens')
        if isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= MAX_TOKENS_LIMIT:
            problems.append('%s: max_tokens must be a whole number from 1 to %d (short, greedy outputs), got %r'
                            % (name, MAX_TOKENS_LIMIT, mt))
        problems.extend(_expect_problems(name, p.get('expect')))
        for kind, fields in (('image', ('media_type', 'data')), ('audio', ('format', 'data'))):
            media = p.get(kind)
            if media is None:
                continue
            if not isinstance(media, dict) or set(media) != set(fields):
                problems.append('%s: %s must be a dict with exactly %s' % (name, kind, ' and '.join(fields)))
            elif not _b64_ok(media.get('data')):
                problems.append('%s: %s.data is not base64' % (name, kind))
        if p.get('image') and p.get('audio'):
            problems.append('%s: give an image or an audio clip, not both' % name)
    return problems


def _expect_problems(name, expect):
    if not isinstance(expect, dict) or not expect:
        return ['%s: expect must be a dict with at least one of %s (an answer nothing checks is not a check)'
                % (name, ', '.join(EXPECT_KEYS))]
    problems = ['%s: expect has unknown key %r (known: %s)' % (name, k, ', '.join(EXPECT_KEYS))
                for k in sorted(set(expect) - set(EXPECT_KEYS))]
    if 'number' in expect and as_number(expect['number']) is None:
        problems.append('%s: expect.number must be a number, got %r' % (name, expect['number']))
    if 'contains' in expect:
        items = expect['contains'] if isinstance(expect['contains'], list) else [expect['contains']]
        if not items or not all(isinstance(i, str) and i for i in items):
            problems.append('%s: expect.contains must be a non-empty string or list of them' % name)
    if 'regex' in expect:
        try:
            re.compile(expect['regex'])
        except (re.error, TypeError) as e:
            problems.append('%s: expect.regex %r does not compile: %s' % (name, expect['regex'], e))
    if 'equals' in expect and not isinstance(expect['equals'], str):
        problems.append('%s: expect.equals must be a string' % name)
    return problems


def merge_prompts(shipped, extra):
    """The shipped golden set with the inventory's entries: an entry whose id is shipped
    replaces it in place, the others are appended in order."""
    out = [dict(p) for p in shipped or []]
    index = dict((p.get('id'), i) for i, p in enumerate(out))
    for p in extra or []:
        if p.get('id') in index:
            out[index[p['id']]] = dict(p)
        else:
            index[p.get('id')] = len(out)
            out.append(dict(p))
    return out


def select(prompts, modalities=None):
    """The prompts a variant can be asked: those whose input it declares (``modalities``)."""
    allowed = set(modalities or DEFAULT_MODALITIES) | set(['text'])
    return [p for p in prompts if modality(p) in allowed]


def chat_request(prompt, model):
    """The OpenAI chat request for one golden prompt: greedy, short, reasoning off (Inkling's
    reasoning parser may spend a small max_tokens on thinking and return empty content)."""
    if prompt.get('image') or prompt.get('audio'):
        content = [{'type': 'text', 'text': prompt['prompt']}]
        if prompt.get('image'):
            img = prompt['image']
            content.append({'type': 'image_url', 'image_url': {
                'url': 'data:%s;base64,%s' % (img['media_type'], ''.join(str(img['data']).split()))}})
        else:
            aud = prompt['audio']
            content.append({'type': 'input_audio', 'input_audio': {
                'data': ''.join(str(aud['data']).split()), 'format': aud['format']}})
    else:
        content = prompt['prompt']
    return {'model': model, 'messages': [{'role': 'user', 'content': content}], 'temperature': 0,
            'max_tokens': int(prompt['max_tokens']), 'seed': 0,
            'chat_template_kwargs': {'reasoning_effort': 'none'}}


def load_request(model, max_tokens, index):
    """One request of the load: streamed, a fixed number of output tokens (ignore_eos)."""
    return {'model': model, 'temperature': 0, 'max_tokens': int(max_tokens), 'ignore_eos': True, 'stream': True,
            'stream_options': {'include_usage': True}, 'seed': index,
            'chat_template_kwargs': {'reasoning_effort': 'none'},
            'messages': [{'role': 'user', 'content': 'Write a long story about a lighthouse keeper (%d).' % index}]}


def describe_expect(expect):
    parts = []
    if 'number' in expect:
        parts.append('the number %s' % _fmt_number(as_number(expect['number'])))
    if 'contains' in expect:
        items = expect['contains'] if isinstance(expect['contains'], list) else [expect['contains']]
        parts.append('text containing %s' % ' and '.join(repr(i) for i in items))
    if 'regex' in expect:
        parts.append('a match of /%s/' % expect['regex'])
    if 'equals' in expect:
        parts.append('exactly %r' % expect['equals'])
    return ', '.join(parts)


def _fmt_number(value):
    return ('%d' % value) if value is not None and value == int(value) else str(value)


def first_number(text):
    match = NUMBER_RE.search(text or '')
    return as_number(match.group(0)) if match else None


def rule_failures(expect, text):
    """What the answer ``text`` misses of its rule (empty: it passes)."""
    text = text or ''
    out = []
    if 'number' in expect:
        want = as_number(expect['number'])
        got = first_number(text)
        if got is None or abs(got - want) > 1e-9:
            out.append('expected the number %s, the first number is %s'
                       % (_fmt_number(want), 'missing' if got is None else _fmt_number(got)))
    if 'contains' in expect:
        items = expect['contains'] if isinstance(expect['contains'], list) else [expect['contains']]
        for item in items:
            if item.lower() not in text.lower():
                out.append('expected text containing %r' % item)
    if 'regex' in expect and not re.search(expect['regex'], text):
        out.append('expected a match of /%s/' % expect['regex'])
    if 'equals' in expect and text.strip() != expect['equals'].strip():
        out.append('expected exactly %r' % expect['equals'])
    return out


def symptoms(text, finish_reason=None, max_tokens=None):
    """The field's garbage symptoms found in one answer (empty: none)."""
    found = []
    if text is None or not text.strip():
        found.append('empty content')
        return found
    if '\x00' in text:
        found.append('null bytes')
    if '\ufffd' in text:
        found.append('undecodable bytes (U+FFFD)')
    match = CHAR_RUN_RE.search(text) or DIGIT_RUN_RE.search(text)
    if match:
        found.append('one character repeated (%r x %d)' % (match.group(1), len(match.group(0))))
    else:
        match = next((m for m in TOKEN_RUN_RE.finditer(text) if not m.group(1).strip().isdigit()), None)
        if match and len(match.group(0)) * 2 >= len(text.strip()):
            found.append('one token repeated (%r x %d)' % (match.group(1), len(match.group(0)) // len(match.group(1))))
    if finish_reason == 'length':
        found.append('cut off at max_tokens (%s) with no stop' % (max_tokens if max_tokens is not None else '?'))
    return found


def judge_prompt(prompt, answer):
    """One prompt's result. ``answer``: {'status', 'content', 'finish_reason', 'error'} as the
    module saw it."""
    answer = answer or {}
    status = answer.get('status')
    text = answer.get('content')
    out = {'id': prompt['id'], 'modality': modality(prompt), 'expected': describe_expect(prompt['expect']),
           'got': show(text), 'status': status}
    if status != 200:
        out['failures'] = ['HTTP %s%s' % (status if status is not None else 'no answer',
                                          (': ' + str(answer['error'])[:160]) if answer.get('error') else '')]
        out['symptoms'] = []
    else:
        out['failures'] = rule_failures(prompt['expect'], text)
        out['symptoms'] = symptoms(text, answer.get('finish_reason'), prompt.get('max_tokens'))
    out['passed'] = not out['failures'] and not out['symptoms']
    out['answer'] = normalise(text)[:200] if status == 200 else None
    return out


def agreement(new_answers, old_answers):
    """(share of the prompts both versions answered whose greedy answers are the same after
    whitespace normalisation, compared ids, differing ids); share None when none is common."""
    common = sorted(set(k for k, v in (new_answers or {}).items() if v is not None)
                    & set(k for k, v in (old_answers or {}).items() if v is not None))
    if not common:
        return None, [], []
    differ = [k for k in common if normalise(new_answers[k]) != normalise(old_answers[k])]
    return round(1.0 - float(len(differ)) / len(common), 4), common, differ


def percentile(values, pct):
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    k = (len(vals) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def load_summary(requests, wall_s, concurrency, max_tokens):
    """The load's figures: ``requests`` is a list of {'status', 'ttft_s', 'tokens', 'error'}."""
    errors = [r for r in requests if r.get('status') != 200 or r.get('error')]
    ok = [r for r in requests if r not in errors]
    tokens = sum(int(r.get('tokens') or 0) for r in ok)
    ttft = percentile([r.get('ttft_s') for r in ok], 50)
    out = {'requests': len(requests), 'concurrency': int(concurrency), 'max_tokens': int(max_tokens),
           'errors': len(errors), 'ttft_p50_s': round(ttft, 4) if ttft is not None else None,
           'output_tokens': tokens, 'wall_s': round(float(wall_s), 3),
           'output_tokens_per_s': round(tokens / float(wall_s), 2) if wall_s and tokens else None}
    if errors:
        first = errors[0]
        out['first_error'] = ('HTTP %s: %s' % (first.get('status') if first.get('status') is not None else 'no answer',
                                               str(first.get('error') or '')[:200])).rstrip(': ')
    return out


def compare_perf(new, old, max_regression, ttft_slack_s=0.0):
    """Failures of the new load's figures against the old ones for the same load (empty: none).
    TTFT p50 may grow and output tokens/s may drop by at most ``max_regression`` (a fraction); TTFT may
    also always grow by ``ttft_slack_s`` seconds (scheduling noise, larger than a fraction of a tiny TTFT)."""
    out = []
    if not new:
        return out
    if new.get('errors'):
        out.append('%d of %d load requests failed (%s)' % (new['errors'], new['requests'], new.get('first_error', '')))
    if not old or old.get('errors') or (old.get('max_tokens'), old.get('concurrency'), old.get('requests')) != \
            (new.get('max_tokens'), new.get('concurrency'), new.get('requests')):
        return out
    r = float(max_regression)
    if new.get('ttft_p50_s') is not None and old.get('ttft_p50_s'):
        if new['ttft_p50_s'] > max(old['ttft_p50_s'] * (1 + r), old['ttft_p50_s'] + float(ttft_slack_s)):
            out.append('TTFT p50 %.3f s, was %.3f s: %+.0f %%, more than the %.0f %% allowed'
                       % (new['ttft_p50_s'], old['ttft_p50_s'], change(new['ttft_p50_s'], old['ttft_p50_s']) * 100,
                          r * 100))
    if old.get('output_tokens_per_s'):
        tps = new.get('output_tokens_per_s') or 0.0
        if tps < old['output_tokens_per_s'] * (1 - r):
            out.append('output %.1f tokens/s, was %.1f: %+.0f %%, more than the %.0f %% allowed'
                       % (tps, old['output_tokens_per_s'], change(tps, old['output_tokens_per_s']) * 100, r * 100))
    return out


def change(new, old):
    if new is None or not old:
        return None
    return round((float(new) - float(old)) / float(old), 4)


def comparable(new, old):
    """Whether two loads can be compared (same shape, old one without errors)."""
    return bool(new and old and not old.get('errors') and (old.get('max_tokens'), old.get('concurrency'),
                old.get('requests')) == (new.get('max_tokens'), new.get('concurrency'), new.get('requests')))


def verdict(results, perf=None, baseline=None, min_agreement=0.8, max_regression=0.2, ttft_slack_s=0.0):
    """The analysis of one host. ``results``: judge_prompt() of every prompt asked; ``perf``:
    load_summary() or None; ``baseline``: the old version's {'answers', 'perf', 'source'}
    (None: no baseline, e.g. a first deployment). Returns a JSON-able dict whose ``passed`` and
    ``message`` say whether the host serves the new version right."""
    baseline = baseline or {}
    failures = []
    for r in results:
        if not r['passed']:
            failures.append('prompt %s: expected %s, got %s (%s)' % (
                r['id'], r['expected'], r['got'], '; '.join(r['failures'] + r['symptoms'])))
    new_answers = dict((r['id'], r['answer']) for r in results)
    share, common, differ = agreement(new_answers, baseline.get('answers'))
    for r in results:
        if r['id'] in common:
            r['matches_old'] = r['id'] not in differ
    if share is not None and share < float(min_agreement):
        failures.append('%d of %d greedy answers differ from the old version\'s (%s): agreement %.0f %%, below the '
                        '%.0f %% required' % (len(differ), len(common), ', '.join(differ), share * 100,
                                              float(min_agreement) * 100))
    old_perf = baseline.get('perf')
    perf_failures = compare_perf(perf, old_perf, max_regression, ttft_slack_s)
    failures.extend(perf_failures)
    out = {
        'passed': not failures,
        'prompts': results,
        'asked': len(results),
        'rule_passed': len([r for r in results if r['passed']]),
        'agreement': share,
        'compared': len(common),
        'differ': differ,
        'min_agreement': float(min_agreement),
        'baseline_source': baseline.get('source') or 'none',
        'perf': perf,
        'perf_old': old_perf if comparable(perf, old_perf) else None,
        'max_regression': float(max_regression),
        'failures': failures,
    }
    if out['perf_old']:
        out['ttft_change'] = change(perf.get('ttft_p50_s'), old_perf.get('ttft_p50_s'))
        out['tokens_per_s_change'] = change(perf.get('output_tokens_per_s'), old_perf.get('output_tokens_per_s'))
    if failures:
        out['message'] = 'canary analysis failed: ' + '; '.join(failures)
    else:
        out['message'] = ('analysis passed: %d of %d prompts right%s%s' % (
            out['rule_passed'], out['asked'],
            ', agreement %.0f %% with %s' % (share * 100, out['baseline_source']) if share is not None else
            ', no old answers to compare (%s)' % out['baseline_source'],
            perf_words(perf, out['perf_old'])))
    return out


def perf_words(perf, old):
    if not perf:
        return ''
    words = ', load %d x %d tokens: TTFT p50 %s s, %s tokens/s' % (
        perf['requests'], perf['max_tokens'], perf.get('ttft_p50_s'), perf.get('output_tokens_per_s'))
    if old:
        words += ' (old %s s, %s tokens/s)' % (old.get('ttft_p50_s'), old.get('output_tokens_per_s'))
    return words


def reference(analysis, variant=None, image_digest=None):
    """What a host keeps of a passed analysis in its state file, for the next rollout's
    comparison: the answers and the load's figures, and what served them."""
    if not analysis or not analysis.get('passed'):
        return {}
    return {'answers': dict((r['id'], r['answer']) for r in analysis.get('prompts', []) if r.get('passed')),
            'perf': analysis.get('perf'), 'variant': variant, 'image_digest': image_digest}


def choose_baseline(live, recorded, variant=None):
    """The baseline of the comparison: the old version asked just now on this host (``live``,
    an analysis of the old version: used when it passed its own rules), else what the host
    recorded after the old version's last passed analysis (``recorded``, for the same variant:
    another variant's figures are not the same load)."""
    if live and live.get('passed') is not None:
        if live.get('passed') or live.get('rule_passed') == live.get('asked'):
            return {'answers': dict((r['id'], r['answer']) for r in live.get('prompts', []) if r.get('passed')),
                    'perf': live.get('perf') if not (live.get('perf') or {}).get('errors') else None,
                    'source': 'the old version on this host, just before its stop'}
    if recorded and recorded.get('answers') and (variant is None or recorded.get('variant') in (None, variant)):
        return {'answers': recorded.get('answers'), 'perf': recorded.get('perf'),
                'source': 'the old version\'s last passed analysis (%s)' % (recorded.get('image_digest') or '?')[:19]}
    return None


# What the journal keeps of a vllm_analysis result: never its invocation (module arguments).
COMPACT_KEYS = ('passed', 'asked', 'rule_passed', 'agreement', 'compared', 'differ', 'min_agreement', 'baseline_source',
                'perf', 'perf_old', 'max_regression', 'failures', 'ttft_change', 'tokens_per_s_change', 'message')


def compact(analysis):
    """The journal's copy of an analysis: every verdict, failures in full, answers cut short."""
    if not analysis:
        return {}
    out = dict((k, v) for k, v in analysis.items() if k in COMPACT_KEYS)
    keys = ('id', 'modality', 'passed', 'expected', 'got', 'failures', 'symptoms', 'matches_old')
    out['prompts'] = [dict((k, r.get(k)) for k in keys) for r in analysis.get('prompts', [])]
    return out
