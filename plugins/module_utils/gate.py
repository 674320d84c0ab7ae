# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Readiness gate for a vLLM server under systemd (field failure F16 of docs/field-failures.md).

A vLLM host goes through three states that look alike from outside:
the process is alive but the port is closed (weights loading, ~10 minutes for
Inkling-NVFP4), HTTP is up and the engine serves, and HTTP is up while the
engine is dead (``/health`` answers 503). ``GateObserver`` is fed one
observation per poll and decides whether to keep waiting, pass or fail. It has
no I/O so that recorded sequences can be replayed in unit tests.

Rules (sources: vLLM ``/health`` returns 503 after EngineDeadError; ``/v1/models``
is the readiness probe used by Dynamo and llm-d; vLLM only listens once the
engine is built; see docs/rollout.md):

* connection refused, a timeout, 502/503/504 on ``/health``: still starting,
  until the deadline;
* the unit restarted (``NRestarts`` above its value when the gate began) or
  entered ``failed``: failure at once;
* ``/health`` 200 and ``/v1/models`` 200 listing the served model name, then
  (optionally) one short completion answered within the latency budget: ready;
* a 5xx from ``/health`` after it had answered 200: failure (engine died);
* any other answer from ``/v1/models`` or the completion than 200 or 502/503/504
  (a 500, a 401 for a wrong API key, a 404), or no completion answer within the
  latency budget: failure at once, since waiting would not change it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

CONTINUE = 'continue'
READY = 'ready'
FAILED = 'failed'

STARTING_HTTP = (None, 502, 503, 504)

# Journal lines that name a cause, most specific first. Each entry:
# (regex, short cause, explanation and remedy).
JOURNAL_CAUSES = (
    (r'Timed out waiting for engines? to send initial message',
     'engine-ready timeout',
     'vLLM gave up waiting for its engine cores (VLLM_ENGINE_READY_TIMEOUT_S, default 600 s) '
     'while weights loaded or kernels compiled (F15); raise service_engine_ready_timeout_s and '
     'keep TimeoutStartSec and the gate deadline at or above it'),
    (r'(Error 802|system not yet initialized)',
     'fabric not initialised (CUDA 802)',
     'NVSwitch fabric registration did not complete: check nvidia-fabricmanager and '
     'nvidia-smi fabric state (F1/F2); rerun the preflight role'),
    (r'unresolvable CDI devices',
     'CDI device not resolvable',
     'podman could not resolve nvidia.com/gpu=all: write the spec to /etc/cdi (F6) or regenerate '
     'it for the running driver (F7)'),
    (r'(ncclSystemError|Error while creating shared memory segment)',
     'NCCL shared memory',
     'NCCL could not create its /dev/shm segments: run the container with --ipc=host or a larger '
     'shm size (F8)'),
    (r'Read-only file system',
     'read-only hub cache written to',
     'vLLM or huggingface_hub tried to write the read-only hub cache: set HF_HUB_OFFLINE=1 and '
     'keep compile caches on writable mounts (F9)'),
    (r'Paged KV not supported on SM 12\.0',
     'unsupported compute capability',
     'Inkling does not run on SM 12.0 (vLLM issue #51405); the variant table must refuse this host'),
    (r'(CUDA out of memory|OutOfMemoryError)',
     'GPU out of memory',
     'lower --gpu-memory-utilization or --max-model-len, or pin --kv-cache-memory-bytes'),
    (r'(unrecognized arguments|error: argument)',
     'bad vLLM arguments',
     'the image does not accept an argument the variant passes: check the variant table against '
     'the image version'),
    (r'(LocalEntryNotFoundError|snapshot .* not found|Cannot find the requested files in the local cache|'
     r'We couldn\'t connect to)',
     'model snapshot missing',
     'the hub cache mounted into the container does not hold the pinned revision: rerun the hf_cache role'),
)


def classify_journal(text):
    """Return (cause, explanation) for the first known failure in ``text``, or (None, None)."""
    if not text:
        return None, None
    for pattern, cause, explanation in JOURNAL_CAUSES:
        if re.search(pattern, text):
            return cause, explanation
    return None, None


def models_list_ids(body):
    """Return the model ids of an OpenAI ``/v1/models`` answer (a parsed dict), or []."""
    if not isinstance(body, dict):
        return []
    data = body.get('data')
    if not isinstance(data, list):
        return []
    return [item.get('id') for item in data if isinstance(item, dict) and item.get('id')]


class Observation(object):
    """What one poll saw. Fields left as None were not probed in this poll."""

    FIELDS = ('active_state', 'sub_state', 'n_restarts', 'health_status', 'models_status', 'models_body',
              'completion_status', 'completion_latency', 'error')

    def __init__(self, elapsed, **fields):
        unknown = sorted(set(fields) - set(self.FIELDS))
        if unknown:
            raise TypeError('Observation has no field %s' % ', '.join(unknown))
        self.elapsed = elapsed
        for name in self.FIELDS:
            setattr(self, name, fields.get(name))


def describe(obs):
    """The last answers of one poll, in words (for progress lines)."""
    def code(status):
        return 'no answer' if status is None else 'HTTP %s' % status
    parts = ['unit %s/%s' % (obs.active_state or '?', obs.sub_state or '?')]
    parts.append('/health %s' % code(obs.health_status))
    if obs.models_status is not None:
        parts.append('/v1/models %s' % code(obs.models_status))
    if obs.completion_status is not None or obs.completion_latency is not None:
        parts.append('completion %s' % code(obs.completion_status))
    return ', '.join(parts)


class GateObserver(object):
    """Decide, poll after poll, whether a freshly (re)started server is ready."""

    def __init__(self, served_model_name, timeout_s, baseline_restarts=None,
                 completion=True, latency_budget_s=30.0):
        self.served_model_name = served_model_name
        self.timeout_s = float(timeout_s)
        self.baseline_restarts = baseline_restarts
        self.completion = completion
        self.latency_budget_s = float(latency_budget_s)
        self.health_seen_ok = False
        self.phase = 'starting'
        self.message = ''
        self.timings = {}

    STATE_KEYS = ('health_seen_ok', 'phase', 'message', 'timings', 'baseline_restarts')

    def to_state(self):
        """What a later round needs to go on where this one stopped (JSON-able)."""
        return dict((k, getattr(self, k)) for k in self.STATE_KEYS)

    def load_state(self, state):
        for key in self.STATE_KEYS:
            if key in (state or {}):
                setattr(self, key, state[key])
        return self

    def awaiting(self):
        """What the gate waits for now, in words."""
        return {'starting': '/health to answer 200',
                'health_ok': '/v1/models to list %s' % self.served_model_name,
                'models_ok': 'a completion'}.get(self.phase, self.phase)

    def _fail(self, message):
        self.phase = 'failed'
        self.message = message
        return FAILED

    def wants(self):
        """Which probes the next poll should make, given what has been seen so far."""
        return {
            'health': True,
            'models': self.phase in ('health_ok', 'models_ok'),
            'completion': self.completion and self.phase == 'models_ok',
        }

    def observe(self, obs):
        """Feed one observation; return CONTINUE, READY or FAILED."""
        if self.phase in ('ready', 'failed'):
            return READY if self.phase == 'ready' else FAILED

        if obs.n_restarts is not None:
            if self.baseline_restarts is None:
                self.baseline_restarts = obs.n_restarts
            elif obs.n_restarts > self.baseline_restarts:
                return self._fail('unit restarted during startup (NRestarts=%d, was %d at gate start)'
                                  % (obs.n_restarts, self.baseline_restarts))
        if obs.active_state == 'failed':
            return self._fail('unit entered the failed state (%s/%s)' % (obs.active_state, obs.sub_state))
        if obs.active_state == 'inactive' and obs.elapsed > 0:
            return self._fail('unit is inactive: the server exited (%s)' % (obs.sub_state or 'dead'))

        status = obs.health_status
        if status == 200:
            if not self.health_seen_ok:
                self.timings['health_ok_s'] = obs.elapsed
            self.health_seen_ok = True
            if self.phase == 'starting':
                self.phase = 'health_ok'
        elif status is not None and status >= 500 and self.health_seen_ok:
            return self._fail('/health answered %d after it had answered 200: the engine died' % status)
        elif status not in STARTING_HTTP:
            return self._fail('/health answered HTTP %s (expected 200, or no answer while loading)' % status)

        if self.phase in ('health_ok', 'models_ok') and obs.models_status is not None:
            if obs.models_status == 200:
                ids = models_list_ids(obs.models_body)
                if self.served_model_name in ids:
                    if self.phase == 'health_ok':
                        self.timings['models_ok_s'] = obs.elapsed
                    self.phase = 'models_ok'
                else:
                    self.message = '/v1/models lists %s, not %s yet' % (ids or 'no model', self.served_model_name)
            elif obs.models_status not in STARTING_HTTP:
                # 500, or a 4xx such as 401 (wrong API key) or 404: waiting will not change it.
                return self._fail('/v1/models answered HTTP %d (expected 200 listing %s)'
                                  % (obs.models_status, self.served_model_name))

        if self.phase == 'models_ok':
            if not self.completion:
                self.phase = 'ready'
                return READY
            if obs.completion_status is not None:
                if obs.completion_status == 200:
                    latency = obs.completion_latency if obs.completion_latency is not None else 0.0
                    self.timings['completion_latency_s'] = latency
                    if latency > self.latency_budget_s:
                        return self._fail('completion took %.1f s, over the latency budget of %.1f s'
                                          % (latency, self.latency_budget_s))
                    self.timings['ready_s'] = obs.elapsed
                    self.phase = 'ready'
                    return READY
                if obs.completion_status not in STARTING_HTTP:
                    return self._fail('completion answered HTTP %s' % obs.completion_status)
            elif obs.completion_latency is not None and obs.completion_latency > self.latency_budget_s:
                # No answer at all (the request timed out): over the budget as surely as a slow answer.
                return self._fail('no completion answer within %.1f s, over the latency budget of %.1f s'
                                  % (obs.completion_latency, self.latency_budget_s))

        if obs.elapsed >= self.timeout_s:
            where = {
                'starting': 'the server never answered /health with 200',
                'health_ok': '/v1/models never listed %s' % self.served_model_name,
                'models_ok': 'no completion was answered',
            }[self.phase]
            return self._fail('not ready after %d s: %s%s' % (
                self.timeout_s, where, (' (%s)' % self.message) if self.message else ''))
        return CONTINUE
