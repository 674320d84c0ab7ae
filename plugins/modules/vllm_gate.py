#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_gate
short_description: Wait until a vLLM server under systemd is ready to serve, or say why not
version_added: "0.1.0"
description:
  - Polls a vLLM OpenAI-compatible server that runs as a systemd unit on the managed host and
    decides whether it became ready within a deadline. Used by the rollout after each restart
    (field failure F16 in the project's docs).
  - Connection refused, timeouts and HTTP 502/503/504 on C(/health) count as "still starting"
    until O(timeout_s), because vLLM only listens once its engine is built (weights, compile,
    warm-up and CUDA graphs; about 10 minutes for Inkling-NVFP4 on 8x H200).
  - The gate fails at once when the unit restarts (its C(NRestarts) goes above the value it had
    when the gate began), enters the C(failed) state or goes inactive, or when C(/health) answers
    a 5xx after it had answered 200 (vLLM answers 503 after C(EngineDeadError)).
  - It also fails at once when C(/v1/models) or the completion answers anything other than 200
    or 502/503/504 (a 500, a 401 for a wrong O(api_key), a 404), or when the completion is not
    answered within O(latency_budget_s), since waiting would not change these.
  - Ready means C(/health) answered 200, C(/v1/models) answered 200 with O(served_model_name)
    among C(data[].id), and, when O(completion=true), one short completion was answered within
    O(latency_budget_s).
  - On failure it reads the unit's journal and names a known cause when it finds one
    (engine-ready timeout, CUDA 802 fabric, unresolvable CDI device, NCCL shared memory,
    read-only hub cache, unsupported compute capability, out of memory, bad arguments,
    missing snapshot).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit:
    description: Name of the systemd service that runs the server, for example C(inkling-vllm.service).
    type: str
    required: true
  url:
    description: Base URL of the server as seen from the managed host.
    type: str
    default: http://127.0.0.1:8000
  served_model_name:
    description: The name C(/v1/models) must list (vLLM's C(--served-model-name)).
    type: str
    required: true
  timeout_s:
    description:
      - Deadline in seconds from the start of the gate. Keep it at or above the unit's
        C(TimeoutStartSec) and vLLM's C(VLLM_ENGINE_READY_TIMEOUT_S).
    type: int
    default: 3600
  poll_interval_s:
    description: Seconds between polls.
    type: float
    default: 2.0
  request_timeout_s:
    description: Timeout in seconds of each HTTP request.
    type: float
    default: 5.0
  completion:
    description: Also require one short completion (C(max_tokens=1)) to be answered.
    type: bool
    default: true
  latency_budget_s:
    description: Longest time in seconds the completion may take.
    type: float
    default: 30.0
  baseline_restarts:
    description:
      - C(NRestarts) of the unit before the restart that this gate follows. When omitted, the
        value read at the first poll is used.
      - Read it after C(systemctl reset-failed), which sets the counter back to 0. A value read
        before it is stale, and would hide restarts until the old count is exceeded.
    type: int
  api_key:
    description: Bearer token for the server when it was started with an API key.
    type: str
  journal_lines:
    description: How many journal lines to read and return on failure.
    type: int
    default: 200
  progress_interval_s:
    description:
      - Seconds between progress lines. The action plugin runs the module in rounds of this length and prints
        one line per round on the controller (elapsed of O(timeout_s), what the gate awaits, the last answers),
        then goes on where the round stopped. 0 runs the module in one go, printing nothing.
    type: float
    default: 30
  round_s:
    description: Internal (set by the action plugin); return after this many seconds with C(decision=continue). 0 for no limit.
    type: float
    default: 0
  state:
    description: Internal (set by the action plugin); what the previous round had seen.
    type: dict
  elapsed_offset_s:
    description: Internal (set by the action plugin); seconds the previous rounds took.
    type: float
    default: 0
notes:
  - Check mode is supported; the module then only reports the unit's current state.
  - The module makes HTTP requests from the managed host, so the server may bind to loopback.
  - An action plugin of the same name runs it in rounds (O(progress_interval_s)) so that the connection is not
    held for an hour and the operator sees progress; no C(async) is needed.
seealso:
  - name: vLLM health endpoint
    description: C(/health) returns 200 when healthy and 503 after the engine died.
    link: https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html
'''

EXAMPLES = r'''
- name: Gate the host after restarting vLLM
  inkling.fleet.vllm_gate:
    unit: inkling-vllm.service
    url: http://127.0.0.1:8000
    served_model_name: inkling
    timeout_s: 3600
  async: 3700
  poll: 10

- name: Quick gate without a completion (health and model list only)
  inkling.fleet.vllm_gate:
    unit: inkling-vllm.service
    served_model_name: inkling
    completion: false
    timeout_s: 120
'''

RETURN = r'''
ready:
  description: Whether the server became ready before the deadline.
  returned: always
  type: bool
  sample: true
elapsed_s:
  description: Seconds the gate waited.
  returned: always
  type: float
  sample: 612.4
phase:
  description: Last phase reached (C(starting), C(health_ok), C(models_ok), C(ready), C(failed)).
  returned: always
  type: str
  sample: ready
timings:
  description: Seconds from the gate's start at which C(/health) and C(/v1/models) first passed, and the completion latency.
  returned: always
  type: dict
  sample: {"health_ok_s": 600.2, "models_ok_s": 600.3, "completion_latency_s": 0.8, "ready_s": 601.1}
n_restarts:
  description: The unit's C(NRestarts) at the last poll.
  returned: always
  type: int
  sample: 0
cause:
  description: Known cause found in the journal on failure, or null.
  returned: always
  type: str
  sample: engine-ready timeout
journal_tail:
  description: Last journal lines of the unit, on failure only.
  returned: when failed
  type: list
  elements: str
decision:
  description: C(ready), C(failed), or C(continue) when a round (O(round_s)) ended first.
  returned: always
  type: str
  sample: ready
last:
  description: The last poll's answers in words.
  returned: always
  type: str
  sample: unit active/running, /health HTTP 200, /v1/models HTTP 200, completion HTTP 200
rounds:
  description: Rounds the action plugin ran.
  returned: always
  type: int
  sample: 21
'''

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.request import Request, build_opener, ProxyHandler
from ansible_collections.inkling.fleet.plugins.module_utils.gate import (
    CONTINUE, READY, GateObserver, Observation, classify_journal, describe)


def _http(opener, method, url, timeout, api_key=None, payload=None):
    """Return (status or None, parsed JSON body or None, seconds taken)."""
    headers = {'Accept': 'application/json'}
    data = None
    if payload is not None:
        data = json.dumps(payload).encode('utf-8')
        headers['Content-Type'] = 'application/json'
    if api_key:
        headers['Authorization'] = 'Bearer %s' % api_key
    req = Request(url, data=data, headers=headers)
    req.get_method = lambda: method
    start = time.time()
    try:
        resp = opener.open(req, timeout=timeout)
        body = resp.read()
        status = resp.getcode()
    except HTTPError as exc:
        return exc.code, None, time.time() - start
    except (URLError, OSError, ValueError):
        return None, None, time.time() - start
    try:
        parsed = json.loads(body.decode('utf-8')) if body else None
    except ValueError:
        parsed = None
    return status, parsed, time.time() - start


def _unit_state(module, unit):
    rc, out, dummy = module.run_command(
        ['systemctl', 'show', unit, '--property=ActiveState,SubState,NRestarts'],
        environ_update={'LC_ALL': 'C'})
    props = {}
    if rc == 0:
        for line in out.splitlines():
            key, sep, value = line.partition('=')
            if sep:
                props[key] = value
    restarts = props.get('NRestarts')
    return (props.get('ActiveState'), props.get('SubState'),
            int(restarts) if restarts and restarts.isdigit() else None)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type='str', required=True),
            url=dict(type='str', default='http://127.0.0.1:8000'),
            served_model_name=dict(type='str', required=True),
            timeout_s=dict(type='int', default=3600),
            poll_interval_s=dict(type='float', default=2.0),
            request_timeout_s=dict(type='float', default=5.0),
            completion=dict(type='bool', default=True),
            latency_budget_s=dict(type='float', default=30.0),
            baseline_restarts=dict(type='int'),
            api_key=dict(type='str', no_log=True),
            journal_lines=dict(type='int', default=200),
            progress_interval_s=dict(type='float', default=30.0),
            round_s=dict(type='float', default=0.0),
            state=dict(type='dict'),
            elapsed_offset_s=dict(type='float', default=0.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    unit = p['unit']
    base = p['url'].rstrip('/')

    active, sub, restarts = _unit_state(module, unit)
    if module.check_mode:
        module.exit_json(changed=False, ready=active == 'active', elapsed_s=0.0, phase='not run (check mode)',
                         timings={}, n_restarts=restarts, cause=None)

    gate = GateObserver(p['served_model_name'], p['timeout_s'], baseline_restarts=p['baseline_restarts'],
                        completion=p['completion'], latency_budget_s=p['latency_budget_s']).load_state(p['state'])
    opener = build_opener(ProxyHandler({}))
    start = time.time() - p['elapsed_offset_s']
    round_start = time.time()
    decision = CONTINUE
    last = ''
    while decision == CONTINUE:
        if p['round_s'] > 0 and time.time() - round_start >= p['round_s']:
            module.exit_json(changed=False, ready=False, decision='continue', elapsed_s=round(time.time() - start, 1),
                             phase=gate.phase, timings=gate.timings, n_restarts=restarts, cause=None,
                             state=gate.to_state(), awaiting=gate.awaiting(), last=last)
        elapsed = time.time() - start
        active, sub, restarts = _unit_state(module, unit)
        want = gate.wants()
        obs = Observation(elapsed, active_state=active, sub_state=sub, n_restarts=restarts)
        if want['health']:
            obs.health_status = _http(opener, 'GET', base + '/health', p['request_timeout_s'], p['api_key'])[0]
        if want['models'] and obs.health_status == 200:
            obs.models_status, obs.models_body, dummy = _http(
                opener, 'GET', base + '/v1/models', p['request_timeout_s'], p['api_key'])
        if want['completion'] and obs.health_status == 200:
            payload = {'model': p['served_model_name'], 'prompt': 'ping', 'max_tokens': 1, 'temperature': 0}
            obs.completion_status, dummy, obs.completion_latency = _http(
                opener, 'POST', base + '/v1/completions',
                max(p['request_timeout_s'], p['latency_budget_s'] + 1), p['api_key'], payload)
        decision = gate.observe(obs)
        last = describe(obs)
        if decision == CONTINUE:
            time.sleep(p['poll_interval_s'])

    result = dict(changed=False, ready=decision == READY, elapsed_s=round(time.time() - start, 1),
                  phase=gate.phase, timings=gate.timings, n_restarts=restarts, cause=None,
                  decision='ready' if decision == READY else 'failed', last=last)
    if decision == READY:
        module.exit_json(**result)

    rc, out, dummy = module.run_command(
        ['journalctl', '--no-pager', '-o', 'cat', '-n', str(p['journal_lines']), '-u', unit],
        environ_update={'LC_ALL': 'C'})
    journal = out if rc == 0 else ''
    cause, explanation = classify_journal(journal)
    result['cause'] = cause
    result['journal_tail'] = journal.splitlines()[-40:]
    msg = '%s: %s' % (unit, gate.message)
    if cause:
        msg += '. Cause found in the journal: %s: %s' % (cause, explanation)
    module.fail_json(msg=msg, **result)


if __name__ == '__main__':
    main()
