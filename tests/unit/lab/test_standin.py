# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Tests for the lab's vLLM stand-in (lab/standin/vllm), run as a real subprocess on 127.0.0.1."""

import http.client
import importlib.machinery
import importlib.util
import json
import os
import re
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

from inkling_test_helpers import free_port, standin_hub

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STANDIN = os.path.join(REPO, 'lab', 'standin', 'vllm')
VARIANTS = os.path.join(REPO, 'data', 'variants.yml')
GOLDEN = os.path.join(REPO, 'data', 'golden_set.yml')
ANSWERS = os.path.join(REPO, 'lab', 'standin', 'answers.json')
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
    return standin_hub(tmp_path, REPO_ID, REV)


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

    def wait_open(self, timeout=60):
        """True once the port answers; False when the process exits first or after timeout seconds.
        The default is generous: CI runs these tests beside the molecule lanes on 2 cores, where a
        start-up of about a second has taken over 15."""
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
        table = yaml.safe_load(fh)['variants']
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


def test_api_key_from_a_config_file_as_the_service_role_writes_it(server, tmp_path):
    """vLLM's --config YAML file (the role's mount secret, JSON form); the command line still wins."""
    cfg = tmp_path / 'inkling-vllm-api-key.yaml'
    cfg.write_text('api-key: %s\n' % json.dumps('from-file'))
    s = server(args=['--config', str(cfg)])
    assert s.wait_open()
    assert s.get('/v1/models')[0] == 401
    assert s.get('/v1/models', {'Authorization': 'Bearer from-file'})[0] == 200
    mod = load_standin()
    assert mod.parse(['serve', '--model', 'a/b', '--config', str(cfg), '--api-key', 'cli']).api_key == 'cli'
    (tmp_path / 'j.yaml').write_text(json.dumps({'api-key': 'json-form'}))
    assert mod.parse(['serve', '--model', 'a/b', '--config', str(tmp_path / 'j.yaml')]).api_key == 'json-form'
    (tmp_path / 'k.json').write_text('{}')
    with pytest.raises(SystemExit):
        mod.parse(['serve', '--model', 'a/b', '--config', str(tmp_path / 'k.json')])
    with pytest.raises(SystemExit):
        mod.parse(['serve', '--model', 'a/b', '--config', str(tmp_path / 'absent.yaml')])


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


# --- chat: the canary analysis's golden set, streaming, load, faults ----------------------------

# Chat pacing for tests where timing is not the point (the defaults make a 10-token answer 0.23 s).
FAST = {'STANDIN_TTFT_S': '0', 'STANDIN_TOKEN_S': '0'}
CANNOT_SEE = 'I cannot see an image in this message.'
CANNOT_HEAR = 'I cannot hear any audio in this message.'


def golden_set():
    with open(GOLDEN) as fh:
        return yaml.safe_load(fh)['prompts']


def answer_table():
    with open(ANSWERS) as fh:
        return json.load(fh)['answers']


def passes(expect, text):
    """The golden set's rule (its header): number = the first number equals it, contains =
    case-insensitive substring(s), regex = re.search, equals = equal after trimming."""
    if 'number' in expect:
        m = re.search(r'-?\d+(?:\.\d+)?', text)
        if not m or float(m.group(0)) != float(expect['number']):
            return False
    if 'contains' in expect:
        items = expect['contains'] if isinstance(expect['contains'], list) else [expect['contains']]
        if not all(i.lower() in text.lower() for i in items):
            return False
    if 'regex' in expect and not re.search(expect['regex'], text):
        return False
    if 'equals' in expect and text.strip() != expect['equals'].strip():
        return False
    return True


def chat_body(prompt, media=True, model=REPO_ID, **extra):
    """The request inkling.fleet.vllm_analysis sends for one golden prompt (media=False: its image or
    audio part left out)."""
    content = prompt['prompt']
    if media and prompt.get('image'):
        content = [{'type': 'text', 'text': prompt['prompt']},
                   {'type': 'image_url', 'image_url': {'url': 'data:%s;base64,%s' % (
                       prompt['image']['media_type'], ''.join(prompt['image']['data'].split()))}}]
    elif media and prompt.get('audio'):
        content = [{'type': 'text', 'text': prompt['prompt']},
                   {'type': 'input_audio', 'input_audio': {'data': ''.join(prompt['audio']['data'].split()),
                                                           'format': prompt['audio']['format']}}]
    body = {'model': model, 'messages': [{'role': 'user', 'content': content}], 'temperature': 0,
            'max_tokens': prompt.get('max_tokens', 16), 'seed': 0,
            'chat_template_kwargs': {'reasoning_effort': 'none'}}
    body.update(extra)
    return body


def by_id(ident):
    return next(p for p in golden_set() if p['id'] == ident)


def stream(s, body, timeout=20):
    """POST a streaming chat request; (headers, [(seconds since the request, event payload)])."""
    conn = http.client.HTTPConnection('127.0.0.1', s.port, timeout=timeout)
    t0 = time.monotonic()
    conn.request('POST', '/v1/chat/completions', json.dumps(dict(body, stream=True)),
                 {'Content-Type': 'application/json'})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    events = []
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode().rstrip('\r\n')
        if line.startswith('data: '):
            events.append((time.monotonic() - t0, line[len('data: '):]))
        else:
            assert line == '', line
    conn.close()
    return resp.headers, events


def content_of(events):
    chunks = [json.loads(p) for _t, p in events if p != '[DONE]']
    return [c['choices'][0]['delta'].get('content') for c in chunks if c['choices'] and
            c['choices'][0]['delta'].get('content') is not None]


def test_golden_set_answered_by_the_table(server):
    table = answer_table()
    assert len(golden_set()) == len(table) == 10
    s = server(env=FAST)
    assert s.wait_open()
    mod = load_standin()
    for p in golden_set():
        code, body = s.post('/v1/chat/completions', chat_body(p))
        assert code == 200, (p['id'], body)
        text = body['choices'][0]['message']['content']
        assert text == table[p['prompt']]['answer'], p['id']
        assert passes(p['expect'], text), (p['id'], text)
        assert body['object'] == 'chat.completion' and body['choices'][0]['finish_reason'] == 'stop'
        assert body['usage']['completion_tokens'] == len(mod.tokens(text))
        assert body['usage']['total_tokens'] == body['usage']['prompt_tokens'] + body['usage']['completion_tokens']
    # Whitespace in the prompt does not matter; the table's drift wordings pass the rules too.
    p = by_id('fact-capital')
    code, body = s.post('/v1/chat/completions', chat_body(dict(p, prompt='  ' + p['prompt'].replace(' ', '\n  '))))
    assert body['choices'][0]['message']['content'] == 'Paris'
    drifts = [(p, table[p['prompt']]['drift']) for p in golden_set() if 'drift' in table[p['prompt']]]
    assert len(drifts) >= 4
    for p, text in drifts:
        assert text != table[p['prompt']]['answer'] and passes(p['expect'], text), (p['id'], text)


def test_media_prompts_need_their_media(server):
    s = server(env=FAST)
    assert s.wait_open()
    image, audio = by_id('image-colour'), by_id('audio-digit')
    assert s.post('/v1/chat/completions', chat_body(image, media=False))[1]['choices'][0]['message']['content'] == CANNOT_SEE
    assert s.post('/v1/chat/completions', chat_body(audio, media=False))[1]['choices'][0]['message']['content'] == CANNOT_HEAR
    bad = chat_body(image)
    bad['messages'][0]['content'][1]['image_url']['url'] = 'data:image/png;base64,@@not base64@@'
    assert s.post('/v1/chat/completions', bad)[1]['choices'][0]['message']['content'] == CANNOT_SEE
    # An image where the audio prompt needs audio is not audio.
    wrong = chat_body(audio, media=False)
    wrong['messages'][0]['content'] = chat_body(image)['messages'][0]['content'][1:] + [
        {'type': 'text', 'text': audio['prompt']}]
    assert s.post('/v1/chat/completions', wrong)[1]['choices'][0]['message']['content'] == CANNOT_HEAR


def test_arithmetic_and_unknown_prompts():
    mod = load_standin()

    def ask(text):
        return mod.answer([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': text}])
    assert ask('What is 12 multiplied by 11? Answer with the number only.') == '132'
    assert ask('What is 40 plus 2?') == '42'
    assert ask('What is 5 minus 9? Answer with the number only.') == '-4'
    assert ask('Who wrote Hamlet?') == 'I do not know the answer to that.'
    assert mod.tokens('2, 3, 5, 7, 11') == ['2,', ' 3,', ' 5,', ' 7,', ' 11']


def test_max_tokens_and_ignore_eos(server):
    s = server(env=FAST)
    assert s.wait_open()
    primes = by_id('instruction-primes')
    code, body = s.post('/v1/chat/completions', chat_body(primes, max_tokens=2))
    assert body['choices'][0]['message']['content'] == '2, 3,'
    assert body['choices'][0]['finish_reason'] == 'length' and body['usage']['completion_tokens'] == 2
    load = {'model': REPO_ID, 'max_tokens': 40, 'ignore_eos': True, 'temperature': 0,
            'messages': [{'role': 'user', 'content': 'Write a long story about a lighthouse keeper (3).'}]}
    code, body = s.post('/v1/chat/completions', load)
    assert body['usage']['completion_tokens'] == 40 and body['choices'][0]['finish_reason'] == 'length'
    text = body['choices'][0]['message']['content']
    assert len(load_standin().tokens(text)) == 40 and len(set(text.split())) > 10  # words, not one repeated character
    _status, events = stream(s, dict(load, stream_options={'include_usage': True}))
    assert len(content_of(events)) == 40
    assert json.loads(events[-2][1])['usage']['completion_tokens'] == 40


def test_streaming_sends_tokens_as_they_come(server):
    # A first token after 1 s: the ping at the end must answer well before that, with room for a
    # loaded CI machine.
    s = server(env={'STANDIN_TTFT_S': '1.0', 'STANDIN_TOKEN_S': '0.03'})
    assert s.wait_open()
    count = by_id('instruction-count')
    headers, events = stream(s, chat_body(count, stream_options={'include_usage': True}))
    assert headers['Content-Type'].startswith('text/event-stream')
    assert events[-1][1] == '[DONE]'
    chunks = [json.loads(p) for _t, p in events[:-1]]
    assert all(c['object'] == 'chat.completion.chunk' for c in chunks)
    assert chunks[0]['choices'][0]['delta']['role'] == 'assistant'
    toks = content_of(events)
    assert ''.join(toks) == '1 2 3 4 5 6 7 8 9 10' and len(toks) == 10
    content_times = [t for (t, p), c in zip(events, chunks + [None]) if c and c['choices'] and
                     c['choices'][0]['delta'].get('content')]
    ttft, last = content_times[0], content_times[-1]
    assert ttft >= 0.95
    assert last - ttft >= 9 * 0.03 * 0.8, (ttft, last)  # tokens arrive one by one, not all at the end
    assert chunks[-2]['choices'][0]['finish_reason'] == 'stop'
    assert chunks[-1]['choices'] == [] and chunks[-1]['usage']['completion_tokens'] == 10
    # Without include_usage there is no usage chunk; non-streaming pays the same time before answering.
    _status, events = stream(s, chat_body(count))
    assert events[-1][1] == '[DONE]' and 'usage' not in json.loads(events[-2][1])
    t0 = time.monotonic()
    code, body = s.post('/v1/chat/completions', chat_body(count))
    assert code == 200 and time.monotonic() - t0 >= 1.0 + 9 * 0.03 * 0.9
    # The gate's ping stays instant.
    t0 = time.monotonic()
    assert s.post('/v1/completions', {'model': REPO_ID, 'prompt': 'ping', 'max_tokens': 1})[0] == 200
    assert time.monotonic() - t0 < 0.7


def test_fault_garbage(server):
    s = server(args=['--served-model-name', 'inkling'], env=dict(FAST, STANDIN_FAULT='garbage'))
    assert s.wait_open()
    for p in golden_set()[:3]:
        code, body = s.post('/v1/chat/completions', chat_body(p, model='inkling'))
        assert code == 200
        assert body['choices'][0]['message']['content'] == '!' * p['max_tokens']
        assert body['choices'][0]['finish_reason'] == 'length'
        assert body['usage']['completion_tokens'] == p['max_tokens']
        assert not passes(p['expect'], body['choices'][0]['message']['content'])
    assert s.get('/health')[0] == 200 and s.get('/v1/models')[0] == 200
    assert s.post('/v1/completions', {'model': 'inkling', 'prompt': 'ping', 'max_tokens': 1})[0] == 200


def test_fault_mm_broken(server):
    s = server(env=dict(FAST, STANDIN_FAULT='mm_broken'))
    assert s.wait_open()
    for p in golden_set():
        text = s.post('/v1/chat/completions', chat_body(p))[1]['choices'][0]['message']['content']
        if p.get('image'):
            assert text == CANNOT_SEE
        elif p.get('audio'):
            assert text == CANNOT_HEAR
        else:
            assert passes(p['expect'], text), (p['id'], text)


def test_fault_drift(server):
    table = answer_table()
    s = server(env=dict(FAST, STANDIN_FAULT='drift'))
    assert s.wait_open()
    drifted = 0
    for p in golden_set():
        text = s.post('/v1/chat/completions', chat_body(p))[1]['choices'][0]['message']['content']
        entry = table[p['prompt']]
        assert text == entry.get('drift', entry['answer']), p['id']
        assert passes(p['expect'], text), (p['id'], text)
        drifted += 'drift' in entry
    assert drifted >= 4
    assert s.post('/v1/chat/completions', chat_body(by_id('fact-capital')))[1]['choices'][0]['message'][
        'content'] == 'Paris, France'


def test_fault_slow(server, monkeypatch):
    def rate(s):
        body = {'model': REPO_ID, 'max_tokens': 16, 'ignore_eos': True,
                'messages': [{'role': 'user', 'content': 'Write a long story about a lighthouse keeper (1).'}]}
        _status, events = stream(s, body)
        times = [t for t, p in events if p != '[DONE]' and json.loads(p)['choices'] and
                 json.loads(p)['choices'][0]['delta'].get('content')]
        return times[0], (len(times) - 1) / (times[-1] - times[0])
    pacing = {'STANDIN_TTFT_S': '0.05', 'STANDIN_TOKEN_S': '0.01'}
    normal, slow = server(env=pacing), server(env=dict(pacing, STANDIN_FAULT='slow'))
    assert normal.wait_open(), normal.stop()
    assert slow.wait_open(), slow.stop()
    (ttft_n, tps_n), (ttft_s, tps_s) = rate(normal), rate(slow)
    assert tps_s <= 0.6 * tps_n, (tps_s, tps_n)
    assert ttft_s >= 1.6 * 0.05 and ttft_n < ttft_s
    monkeypatch.setenv('STANDIN_TTFT_S', '0.05')
    monkeypatch.setenv('STANDIN_TOKEN_S', '0.02')
    monkeypatch.setenv('STANDIN_SLOW_FACTOR', '2')
    assert load_standin().pace('') == pytest.approx((0.1, 0.04))
    assert load_standin().pace('slow') == pytest.approx((0.2, 0.08))


def test_fault_overload(server):
    s = server(env={'STANDIN_FAULT': 'overload', 'STANDIN_MAX_CONCURRENCY': '8',
                    'STANDIN_TTFT_S': '0.5', 'STANDIN_TOKEN_S': '0'})
    assert s.wait_open()
    body = chat_body(by_id('arithmetic-multiply'))
    results = []
    barrier = threading.Barrier(12)

    def call():
        barrier.wait()
        results.append(s.post('/v1/chat/completions', body))
    threads = [threading.Thread(target=call) for _i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    codes = sorted(code for code, _body in results)
    assert len(codes) == 12
    assert codes.count(200) >= 8 and codes.count(500) >= 1, codes
    assert all(b['choices'][0]['message']['content'] == '391' for c, b in results if c == 200)
    err = json.loads(next(b for c, b in results if c == 500))['error']
    assert err == {'message': 'CUDA error: an illegal memory access was encountered',
                   'type': 'InternalServerError', 'code': 500}
    # One at a time it answers again.
    assert s.post('/v1/chat/completions', body)[0] == 200
    rc, log = s.stop()
    assert re.search(r'ERROR .*CUDA error: an illegal memory access was encountered', log)
