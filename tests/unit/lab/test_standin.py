# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Tests for the lab's vLLM stand-in (lab/standin/vllm), run as a real subprocess on 127.0.0.1."""

import importlib.machinery
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STANDIN = os.path.join(REPO, 'lab', 'standin', 'vllm')
VARIANTS = os.path.join(REPO, 'roles', 'preflight', 'defaults', 'main', 'variants.yml')
REPO_ID = 'thinkingmachines/Inkling-NVFP4'
REV = '0123456789abcdef0123456789abcdef01234567'


def load_standin():
    loader = importlib.machinery.SourceFileLoader('standin_vllm', STANDIN)
    spec = importlib.util.spec_from_loader('standin_vllm', loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture
def hub(tmp_path):
    """A hub cache with the model at REV (refs/main -> REV), two shards."""
    repo = tmp_path / 'hub' / ('models--' + REPO_ID.replace('/', '--'))
    snap = repo / 'snapshots' / REV
    (repo / 'blobs').mkdir(parents=True)
    (repo / 'refs').mkdir()
    snap.mkdir(parents=True)
    (repo / 'refs' / 'main').write_text(REV)
    files = {'config.json': '{"model_type": "inkling"}',
             'model.safetensors.index.json': json.dumps({'weight_map': {'a': 'model-1.safetensors',
                                                                        'b': 'model-2.safetensors'}}),
             'model-1.safetensors': 'x', 'model-2.safetensors': 'y'}
    for i, (name, text) in enumerate(sorted(files.items())):
        blob = repo / 'blobs' / ('%064d' % i)
        blob.write_text(text)
        (snap / name).symlink_to(os.path.join('..', '..', 'blobs', blob.name))
    return tmp_path / 'hub'


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server(object):
    def __init__(self, hub, tmp_path, args=(), env=None, offline=True):
        self.port = free_port()
        e = dict(os.environ)
        for k in list(e):
            if k.startswith(('STANDIN_', 'VLLM_', 'HF_')):
                del e[k]
        e.update({'HF_HUB_CACHE': str(hub), 'VLLM_CACHE_ROOT': str(tmp_path / 'vllm-cache')})
        if offline:
            e['HF_HUB_OFFLINE'] = '1'
        e.update(env or {})
        argv = [sys.executable, STANDIN, 'serve', '--model', REPO_ID, '--host', '127.0.0.1',
                '--port', str(self.port)] + list(args)
        self.proc = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def url(self, path):
        return 'http://127.0.0.1:%d%s' % (self.port, path)

    def get(self, path, headers=None):
        req = urllib.request.Request(self.url(path), headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path, body, headers=None):
        h = {'Content-Type': 'application/json'}
        h.update(headers or {})
        req = urllib.request.Request(self.url(path), data=json.dumps(body).encode(), headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def port_open(self):
        try:
            socket.create_connection(('127.0.0.1', self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def wait_open(self, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.port_open():
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def finish(self, timeout=10):
        """Wait for a process that must exit on its own; (rc, stderr)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        return self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, err


@pytest.fixture
def server(hub, tmp_path):
    started = []

    def make(*args, **kw):
        s = Server(hub, tmp_path, *args, **kw)
        started.append(s)
        return s
    yield make
    for s in started:
        s.stop()


# --- the command line -------------------------------------------------------------

def variant_args():
    with open(VARIANTS) as fh:
        table = yaml.safe_load(fh)['preflight_variant_table']
    return sorted((name, v.get('vllm_args', [])) for name, v in table.items())


@pytest.mark.parametrize('name,args', variant_args())
def test_accepts_every_variant_command_line(name, args):
    mod = load_standin()
    full = ['serve'] + list(args) + ['--model', REPO_ID, '--revision', REV, '--served-model-name', 'inkling',
                                     '--host', '0.0.0.0', '--port', '8000', '--shutdown-timeout', '120']
    parsed = mod.parse(full)
    assert parsed.model == REPO_ID
    assert parsed.port == 8000


def test_dotted_and_json_kernel_config():
    mod = load_standin()
    a = mod.parse(['serve', '--model', 'o/m', '--kernel-config.enable_flashinfer_autotune=False',
                   '--speculative-config', '{"method": "mtp", "num_speculative_tokens": 1}'])
    assert a.dotted == {'kernel-config': {'enable_flashinfer_autotune': 'False'}}
    assert a.speculative_config == {'method': 'mtp', 'num_speculative_tokens': 1}


@pytest.mark.parametrize('argv', [
    ['serve', '--model', 'o/m', '--no-such-flag'],
    ['serve', '--model', 'o/m', '--kernel-config', '{not json'],
    ['serve', '--model', 'o/m', '--tensor-parallel-size', 'eight'],
    ['--model', 'o/m'],  # no "serve": the unit must pass only what follows the entrypoint
])
def test_rejects_bad_command_lines(argv):
    mod = load_standin()
    with pytest.raises(SystemExit) as exc:
        mod.parse(argv)
    assert exc.value.code != 0


def test_unknown_flag_exits_2_as_a_process(hub, tmp_path):
    s = Server(hub, tmp_path, args=['--bogus-flag'])
    rc, err = s.finish()
    assert rc == 2
    assert 'unrecognized arguments: --bogus-flag' in err


# --- the model snapshot -------------------------------------------------------------

def test_refuses_without_offline_mode(hub, tmp_path):
    s = Server(hub, tmp_path, offline=False)
    rc, err = s.finish()
    assert rc == 1 and 'HF_HUB_OFFLINE is not set' in err


def test_refuses_missing_revision(hub, tmp_path):
    s = Server(hub, tmp_path, args=['--revision', 'f' * 40])
    rc, err = s.finish()
    assert rc == 1 and 'config.json not found' in err


def test_refuses_missing_shard(hub, tmp_path):
    snap = hub / ('models--' + REPO_ID.replace('/', '--')) / 'snapshots' / REV
    os.unlink(os.path.realpath(str(snap / 'model-2.safetensors')))  # dangling link, as after `rsync -a` (F10)
    s = Server(hub, tmp_path)
    rc, err = s.finish()
    assert rc == 1 and '1 of 2 shards missing' in err


def test_revision_by_branch_and_by_commit(server):
    for rev in ('main', REV):
        s = server(args=['--revision', rev])
        assert s.wait_open(), s.stop()


# --- serving ---------------------------------------------------------------------------

def test_serves_openai_endpoints(server):
    s = server(args=['--served-model-name', 'inkling', '--revision', REV])
    assert s.wait_open()
    assert s.get('/health')[0] == 200
    code, body = s.get('/v1/models')
    assert code == 200 and [m['id'] for m in json.loads(body)['data']] == ['inkling']
    code, body = s.post('/v1/chat/completions', {'model': 'inkling', 'messages': [{'role': 'user', 'content': 'hi'}]})
    assert code == 200 and body['choices'][0]['message']['role'] == 'assistant'
    code, body = s.post('/v1/completions', {'model': 'inkling', 'prompt': 'hi', 'max_tokens': 1})
    assert code == 200 and body['object'] == 'text_completion'
    assert s.post('/v1/completions', {'model': 'other', 'prompt': 'x'})[0] == 404
    code, metrics = s.get('/metrics')
    assert code == 200 and 'standin_requests_total 2' in metrics and 'revision="%s"' % REV in metrics


def test_api_key(server):
    s = server(env={'VLLM_API_KEY': 'k1'})
    assert s.wait_open()
    assert s.get('/v1/models')[0] == 401
    assert s.get('/v1/models', {'Authorization': 'Bearer k1'})[0] == 200
    assert s.get('/health')[0] == 200  # health stays open, as in vLLM


def test_port_closed_during_startup_delay(server):
    s = server(env={'STANDIN_STARTUP_DELAY_S': '1.5'})
    t0 = time.time()
    time.sleep(0.5)
    assert not s.port_open()
    assert s.wait_open()
    assert time.time() - t0 >= 1.4


def test_engine_ready_timeout(hub, tmp_path):
    s = Server(hub, tmp_path, env={'STANDIN_STARTUP_DELAY_S': '5', 'VLLM_ENGINE_READY_TIMEOUT_S': '0.5'})
    rc, err = s.finish()
    assert rc == 1
    assert 'TimeoutError: Timed out waiting for engines to send initial message on input socket.' in err


def test_sigterm_during_startup_exits_promptly(hub, tmp_path):
    s = Server(hub, tmp_path, env={'STANDIN_STARTUP_DELAY_S': '60'})
    time.sleep(0.5)
    t0 = time.time()
    rc, err = s.stop()
    assert rc == 0 and time.time() - t0 < 5


def test_compile_cache_marker(server, tmp_path):
    s = server()
    assert s.wait_open()
    assert 'standin_compile_cache_warm 0' in s.get('/metrics')[1]
    s.stop()
    s2 = server()
    assert s2.wait_open()
    assert 'standin_compile_cache_warm 1' in s2.get('/metrics')[1]


# --- faults ------------------------------------------------------------------------------

def test_fault_never_healthy(server):
    s = server(env={'STANDIN_FAULT': 'never_healthy'})
    assert s.wait_open()
    assert s.get('/health')[0] == 503
    assert s.get('/v1/models')[0] == 200


def test_fault_wrong_model(server):
    s = server(args=['--served-model-name', 'inkling'], env={'STANDIN_FAULT': 'wrong_model'})
    assert s.wait_open()
    assert [m['id'] for m in json.loads(s.get('/v1/models')[1])['data']] == ['other-model']


def test_fault_crash_on_start(hub, tmp_path):
    s = Server(hub, tmp_path, env={'STANDIN_FAULT': 'crash_on_start'})
    assert s.proc.wait(timeout=10) == 1
    assert 'Engine core initialization failed' in s.stop()[1]


def test_fault_crash_once(hub, tmp_path):
    """The first start crashes and leaves a marker in VLLM_CACHE_ROOT; the next start serves."""
    s = Server(hub, tmp_path, env={'STANDIN_FAULT': 'crash_once'})
    assert s.proc.wait(timeout=10) == 1
    assert 'Engine core initialization failed' in s.stop()[1]
    assert (tmp_path / 'vllm-cache' / 'standin-crashed-once').exists()
    s = Server(hub, tmp_path, env={'STANDIN_FAULT': 'crash_once'})
    try:
        assert s.wait_open()
        assert s.get('/health')[0] == 200
    finally:
        s.stop()


def test_fault_exit_after_start(server):
    s = server(env={'STANDIN_FAULT': 'exit_after_start', 'STANDIN_FAULT_AFTER_S': '0.5'})
    assert s.wait_open()
    assert s.proc.wait(timeout=10) == 1


def test_sigterm_drains_in_flight_request(server):
    s = server(args=['--shutdown-timeout', '10'], env={'STANDIN_FAULT': 'slow_completion', 'STANDIN_SLOW_S': '1.5'})
    assert s.wait_open()
    result = {}

    def call():
        result['r'] = s.post('/v1/completions', {'model': REPO_ID, 'prompt': 'x'})
    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.5)
    rc, err = s.stop()
    t.join(10)
    assert result['r'][0] == 200
    assert rc == 0
    assert 'draining 1 in-flight request(s)' in err and 'Shutdown complete.' in err
