#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_analysis
short_description: Check that a vLLM server answers right, and as fast as the version before it
version_added: "0.2.0"
description:
  - The canary analysis of the rollout (docs/rollout.md, "Canary analysis"). A server that passed
    C(inkling.fleet.vllm_gate) answers HTTP 200; this module reads the answers. NVFP4
    mixture-of-experts models on Hopper fallback kernels are known to answer 200 with garbage
    (field failures F19-F21 in the project's docs).
  - Asks each prompt of O(prompts) (a golden set) once, with greedy decoding (C(temperature=0),
    C(seed=0)) and the prompt's short C(max_tokens), through C(/v1/chat/completions), and checks the
    answer by the prompt's own rule (C(expect) - number, contains, regex, equals) and by detectors of
    the field's symptoms - empty content, null bytes, one character repeated, one token repeated, an
    answer cut off at C(max_tokens) with no stop.
  - Image and audio prompts are sent as OpenAI content parts (C(image_url) with a data URL,
    C(input_audio)); only the prompts whose input is in O(modalities) are asked.
  - When O(load_requests) > 0, runs a short bounded load after the prompts - that many streamed
    requests at once, each of O(load_max_tokens) output tokens (C(ignore_eos)) - and reports TTFT p50
    (time to the first streamed token), output tokens per second and the requests that errored.
  - With O(baseline) (the old version's answers and load figures), compares - the share of greedy
    answers equal to the old ones must be at least O(min_agreement), TTFT p50 may grow and tokens/s
    drop by at most O(max_regression), and no load request may error.
  - Fails, naming each prompt with what was expected and what came back (truncated), when
    O(fail_on_problems=true) and anything does not pass. With O(fail_on_problems=false) (the old
    version asked as a baseline) it only reports.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  url:
    description: Base URL of the server as seen from the managed host.
    type: str
    default: http://127.0.0.1:8000
  served_model_name:
    description: The model name the requests carry (vLLM's C(--served-model-name)).
    type: str
    required: true
  api_key:
    description: Bearer token for the server when it was started with an API key.
    type: str
  prompts:
    description:
      - The golden set - a list of dicts with C(id), C(prompt), C(max_tokens), C(expect) and optionally
        C(image) (C(media_type), C(data) base64) or C(audio) (C(format), C(data) base64). Checked
        first; a bad entry fails before any request.
    type: list
    elements: dict
    required: true
  modalities:
    description: The inputs the variant declares (C(text), C(image), C(audio)); other prompts are not asked.
    choices: [text, image, audio]
    type: list
    elements: str
    default: [text, image, audio]
  request_timeout_s:
    description: Timeout in seconds of each request.
    type: float
    default: 120
  load_requests:
    description: Streamed requests the load sends at once; 0 runs no load.
    type: int
    default: 0
  load_max_tokens:
    description: Output tokens of each load request.
    type: int
    default: 128
  baseline:
    description:
      - The old version's C(answers) (prompt id to answer) and C(perf) (the same load's figures), with
        C(source) in words. Omitted - no comparison (a first deployment), the rules still apply.
    type: dict
  min_agreement:
    description: Share (0 to 1) of the compared greedy answers that must equal the old version's.
    type: float
    default: 0.8
  max_regression:
    description: Largest fraction by which TTFT p50 may grow, or output tokens/s drop, against O(baseline).
    type: float
    default: 0.2
  ttft_slack_s:
    description:
      - Seconds by which TTFT p50 may always grow, whatever O(max_regression) says; below it a difference is
        scheduling noise (a tiny TTFT, a loaded machine).
    type: float
    default: 0.05
    version_added: "0.2.0"
  fail_on_problems:
    description: Fail when the analysis does not pass. V(false) only reports (the old version as a baseline).
    type: bool
    default: true
notes:
  - Check mode is supported - nothing is asked; RV(would_ask) lists the prompts and the load.
  - Bounded - one request per prompt and O(load_requests) load requests, each within O(request_timeout_s).
  - The requests go from the managed host to O(url), so the server may bind to loopback.
seealso:
  - module: inkling.fleet.vllm_gate
'''

EXAMPLES = r'''
- name: Analyse the canary against the old version's answers and load
  inkling.fleet.vllm_analysis:
    served_model_name: inkling
    prompts: "{{ rollout_analysis_golden_set }}"
    modalities: [text, image, audio]
    load_requests: 16
    load_max_tokens: 128
    baseline: "{{ old_version_analysis }}"

- name: Only the answer check (a later host)
  inkling.fleet.vllm_analysis:
    served_model_name: inkling
    prompts:
      - id: arithmetic
        prompt: What is 6 times 7? Answer with the number only.
        max_tokens: 8
        expect:
          number: 42
'''

RETURN = r'''
passed:
  description: Whether every prompt passed its rule and the detectors, the agreement was reached and the load did not regress.
  returned: always
  type: bool
  sample: true
message:
  description: The verdict in one line; on failure each failing prompt, what was expected and what came back.
  returned: always
  type: str
  sample: "canary analysis failed: prompt fact-capital: expected a match of /(?i)\\bparis\\b/, got '!!!!!!!!!!!!!!!!' (...)"
asked:
  description: How many prompts were asked.
  returned: always
  type: int
  sample: 10
rule_passed:
  description: How many of them passed their rule and the detectors.
  returned: always
  type: int
  sample: 10
compared:
  description: How many answers were compared with the old version's.
  returned: always
  type: int
  sample: 10
min_agreement:
  description: The agreement required (O(min_agreement)).
  returned: always
  type: float
  sample: 0.8
max_regression:
  description: The regression allowed (O(max_regression)).
  returned: always
  type: float
  sample: 0.2
baseline_source:
  description: Where the old version's answers and figures came from, or C(none).
  returned: always
  type: str
  sample: the old version on this host, just before its stop
ttft_change:
  description: TTFT p50 change against the old figures (a fraction; positive is slower).
  returned: when the load was compared
  type: float
  sample: 0.04
tokens_per_s_change:
  description: Output tokens/s change against the old figures (a fraction; negative is slower).
  returned: when the load was compared
  type: float
  sample: -0.02
prompts:
  description:
    - Per prompt - id, modality, status (HTTP), passed, expected, got (truncated), failures, symptoms, answer.
    - C(matches_old) only when the prompt was compared with the old version's answer.
  returned: always
  type: list
  elements: dict
agreement:
  description: Share of the compared greedy answers equal to the old version's, or null without a baseline.
  returned: always
  type: float
  sample: 1.0
differ:
  description: Ids of the prompts whose answers differ from the old version's.
  returned: always
  type: list
  elements: str
perf:
  description: The load's figures (requests, concurrency, max_tokens, errors, ttft_p50_s, output_tokens_per_s, wall_s), or null.
  returned: always
  type: dict
perf_old:
  description: The old version's figures for the same load, when comparable.
  returned: always
  type: dict
failures:
  description: Every reason the analysis did not pass.
  returned: always
  type: list
  elements: str
elapsed_s:
  description: Seconds the analysis took.
  returned: always
  type: float
  sample: 14.2
would_ask:
  description: In check mode, the prompt ids that would be asked and the load.
  returned: check mode
  type: dict
'''

import json
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.request import Request, build_opener, ProxyHandler
from ansible_collections.inkling.fleet.plugins.module_utils import analysis


class Client(object):
    """HTTP to the server: one chat request, or one streamed load request."""

    def __init__(self, url, api_key, timeout):
        self.base = url.rstrip('/')
        self.api_key = api_key
        self.timeout = timeout
        self.opener = build_opener(ProxyHandler({}))

    def _open(self, payload):
        headers = {'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'}
        if self.api_key:
            headers['Authorization'] = 'Bearer %s' % self.api_key
        req = Request(self.base + '/v1/chat/completions', data=json.dumps(payload).encode('utf-8'), headers=headers)
        return self.opener.open(req, timeout=self.timeout)

    @staticmethod
    def _http_error(exc):
        try:
            body = exc.read().decode('utf-8', 'replace')
            err = json.loads(body).get('error')
            body = err.get('message', body) if isinstance(err, dict) else (err or body)
        except (ValueError, AttributeError, OSError):
            body = str(exc)
        return {'status': exc.code, 'error': str(body)[:300]}

    def chat(self, payload):
        try:
            resp = self._open(payload)
            body = json.loads(resp.read().decode('utf-8'))
        except HTTPError as exc:
            return self._http_error(exc)
        except (URLError, OSError, ValueError) as exc:
            return {'status': None, 'error': str(exc)[:300]}
        try:
            choice = body['choices'][0]
            return {'status': 200, 'content': (choice.get('message') or {}).get('content'),
                    'finish_reason': choice.get('finish_reason'),
                    'tokens': (body.get('usage') or {}).get('completion_tokens')}
        except (KeyError, IndexError, TypeError, AttributeError):
            return {'status': 200, 'content': None, 'error': 'no choices in the answer'}

    def stream(self, payload):
        start = time.time()
        out = {'status': None, 'ttft_s': None, 'tokens': 0}
        chunks = 0
        try:
            resp = self._open(payload)
            out['status'] = resp.getcode()
            done = False
            for raw in resp:
                if time.time() - start > self.timeout:
                    out['error'] = 'the stream ran past request_timeout_s (%ss)' % self.timeout
                    break
                line = raw.decode('utf-8', 'replace').strip()
                if not line.startswith('data:'):
                    continue
                data = line[5:].strip()
                if data == '[DONE]':
                    done = True
                    break
                event = json.loads(data)
                if event.get('error'):
                    out['error'] = str(event['error'])[:300]
                    break
                for choice in event.get('choices') or []:
                    if (choice.get('delta') or {}).get('content'):
                        chunks += 1
                        if out['ttft_s'] is None:
                            out['ttft_s'] = time.time() - start
                if event.get('usage'):
                    out['tokens'] = int(event['usage'].get('completion_tokens') or 0)
            if not done and not out.get('error'):
                out['error'] = 'the stream ended without [DONE]'
        except HTTPError as exc:
            out.update(self._http_error(exc))
        except (URLError, OSError, ValueError) as exc:
            out['error'] = str(exc)[:300]
        if not out['tokens']:
            out['tokens'] = chunks
        out['elapsed_s'] = time.time() - start
        return out


def run_load(client, model, requests, max_tokens):
    results = [None] * requests
    barrier = threading.Barrier(requests)

    def one(i):
        try:
            barrier.wait(timeout=client.timeout)
        except threading.BrokenBarrierError:
            pass
        results[i] = client.stream(analysis.load_request(model, max_tokens, i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(requests)]
    for t in threads:
        t.daemon = True  # a hung request never keeps the module from exiting
    start = time.time()
    deadline = start + client.timeout * 2 + 5  # one deadline for the whole load
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.time()))
    wall = time.time() - start
    done = [r if r is not None else {'status': None, 'error': 'no answer within the timeout'} for r in list(results)]
    return analysis.load_summary(done, wall, requests, max_tokens)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type='str', default='http://127.0.0.1:8000'),
            served_model_name=dict(type='str', required=True),
            api_key=dict(type='str', no_log=True),
            prompts=dict(type='list', elements='dict', required=True),
            modalities=dict(type='list', elements='str', default=['text', 'image', 'audio'], choices=['text', 'image', 'audio']),
            request_timeout_s=dict(type='float', default=120.0),
            load_requests=dict(type='int', default=0),
            load_max_tokens=dict(type='int', default=128, no_log=False),
            baseline=dict(type='dict'),
            min_agreement=dict(type='float', default=0.8),
            max_regression=dict(type='float', default=0.2),
            ttft_slack_s=dict(type='float', default=0.05),
            fail_on_problems=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problems = analysis.validate_prompts(p['prompts'], 'prompts')
    if problems:
        module.fail_json(msg='the golden set is not valid: ' + '; '.join(problems), passed=False)
    prompts = analysis.select(p['prompts'], p['modalities'])
    if module.check_mode:
        module.exit_json(changed=False, passed=True, message='check mode: nothing asked', prompts=[], agreement=None,
                         differ=[], perf=None, perf_old=None, failures=[], elapsed_s=0.0,
                         would_ask={'prompts': [q['id'] for q in prompts], 'load_requests': p['load_requests'],
                                    'load_max_tokens': p['load_max_tokens'],
                                    'baseline': (p['baseline'] or {}).get('source') or 'none'})
    start = time.time()
    client = Client(p['url'], p['api_key'], p['request_timeout_s'])
    results = [analysis.judge_prompt(q, client.chat(analysis.chat_request(q, p['served_model_name'])))
               for q in prompts]
    perf = None
    if p['load_requests'] > 0:
        perf = run_load(client, p['served_model_name'], p['load_requests'], p['load_max_tokens'])
    out = analysis.verdict(results, perf, p['baseline'], p['min_agreement'], p['max_regression'],
                           p['ttft_slack_s'])
    out['elapsed_s'] = round(time.time() - start, 2)
    out.setdefault('perf_old', None)
    if out['passed'] or not p['fail_on_problems']:
        module.exit_json(changed=False, **out)
    module.fail_json(msg=out['message'], **out)


if __name__ == '__main__':
    main()
