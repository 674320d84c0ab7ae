# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The vLLM stand-in as a two-host replica (multi-node data parallel): the head serves only once
its headless worker has joined, fails when it does not within VLLM_ENGINE_READY_TIMEOUT_S, and
dies (as vLLM's engine does) when the worker leaves; the worker exits when the head goes away."""

import time

import pytest
import yaml

from test_standin import REPO_ID, REV, VARIANTS, Server, free_port, load_standin
from test_standin import hub as _hub_fixture

hub = _hub_fixture


def node_args(role, port):
    with open(VARIANTS) as fh:
        entry = yaml.safe_load(fh)['variants']['sm90-h100-2node']
    fill = {'{head_address}': '127.0.0.1', '{port}': str(port), '{node_rank}': '1', '{nodes}': '2'}
    return entry['vllm_args'] + [fill.get(a, a) for a in entry['node_args'][role]]


@pytest.fixture
def replica(hub, tmp_path):
    started = []
    rpc = free_port()

    def make(role, env=None):
        path = tmp_path / role
        path.mkdir(exist_ok=True)
        s = Server(hub, path, args=node_args(role, rpc) + ['--revision', REV], env=env)
        started.append(s)
        return s
    yield make
    for s in started:
        s.stop()


def test_the_variant_node_args_parse_and_give_the_roles():
    mod = load_standin()
    head = mod.parse(['serve', '--model', REPO_ID] + node_args('head', 1234))
    worker = mod.parse(['serve', '--model', REPO_ID] + node_args('worker', 1234))
    assert mod.dp_role(head) == 'head' and mod.dp_role(worker) == 'worker'
    assert mod.dp_role(mod.parse(['serve', '--model', REPO_ID, '-tp', '8'])) is None
    assert worker.data_parallel_start_rank == 1 and worker.data_parallel_rpc_port == 1234


def test_the_head_serves_only_once_the_worker_joined(replica):
    head = replica('head')
    time.sleep(1.5)
    assert not head.port_open() and head.proc.poll() is None
    worker = replica('worker')
    assert head.wait_open(60)
    assert head.get('/health')[0] == 200
    assert worker.proc.poll() is None
    assert not worker.port_open()               # headless: no API server


def test_a_worker_may_start_first(replica):
    worker = replica('worker')
    time.sleep(1)
    head = replica('head')
    assert head.wait_open(60)


def test_the_head_fails_when_the_worker_never_joins(replica):
    head = replica('head', env={'VLLM_ENGINE_READY_TIMEOUT_S': '2'})
    rc, err = head.finish(timeout=15)
    assert rc == 1
    assert 'data parallel rank(s) [1] never joined the head' in err
    assert 'VLLM_ENGINE_READY_TIMEOUT_S=2s' in err


def test_a_worker_that_crashes_on_start_leaves_the_head_unhealthy(replica):
    head = replica('head', env={'VLLM_ENGINE_READY_TIMEOUT_S': '3'})
    worker = replica('worker', env={'STANDIN_FAULT': 'crash_on_start'})
    rc, _err = worker.finish(timeout=10)
    assert rc == 1
    assert not head.wait_open(1)
    assert head.finish(timeout=15)[0] == 1


def test_losing_the_worker_kills_the_head_and_losing_the_head_ends_the_worker(replica):
    head = replica('head')
    worker = replica('worker')
    assert head.wait_open(60)
    rc, _err = worker.stop()
    assert rc == 0                              # SIGTERM: a clean stop
    rc, err = head.finish(timeout=10)
    assert rc == 1 and 'EngineDeadError: data parallel rank 1' in err

    head = replica('head')
    worker = replica('worker')
    assert head.wait_open(60)
    head.stop()
    rc, err = worker.finish(timeout=10)
    assert rc == 1 and 'went away' in err
