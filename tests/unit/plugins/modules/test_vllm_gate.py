# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""vllm_gate run as Ansible runs it: real HTTP against a local server, systemctl and journalctl
answered by scripts on PATH that replay a sequence of unit states."""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from inkling_test_helpers import run_module

MODEL = 'inkling'
KEY = 'k-secret-not-to-be-logged'
UNIT = 'inkling-vllm.service'

SYSTEMCTL = '''#!{python}
# Fake systemctl: `show UNIT --property=...` answers the next state of $GATE_STATES (the last one repeats).
import json, os, sys
with open(os.environ['GATE_STATES']) as f:
    states = json.load(f)
count_file = os.environ['GATE_STATES'] + '.count'
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, 'w').write(str(n + 1))
with open(os.environ['GATE_STATES'] + '.argv', 'a') as f:
    f.write(json.dumps(sys.argv[1:]) + '\\n')
state = states[min(n, len(states) - 1)]
if state is None:
    sys.stderr.write('Failed to connect to bus\\n')
    sys.exit(1)
sys.stdout.write(''.join('%s=%s\\n' % tuple(kv) for kv in state))
'''

JOURNALCTL = '''#!{python}
import os, sys
with open(os.environ['GATE_STATES'] + '.journalctl', 'w') as f:
    f.write(' '.join(sys.argv[1:]))
sys.stdout.write(open(os.environ['GATE_JOURNAL']).read())
'''


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else b''
        srv = self.server
        with srv.lock:
            srv.requests.append({'method': self.command, 'path': self.path,
                                 'auth': self.headers.get('Authorization'),
                                 'body': json.loads(body) if body else None})
            seq = srv.answers.get(self.path, [(404, {})])
            status, obj = seq.pop(0) if len(seq) > 1 else seq[0]
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = _answer
    do_POST = _answer


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    srv.lock = threading.Lock()
    srv.requests = []
    srv.answers = {}
    thread = threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05})
    thread.daemon = True
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def models(*ids):
    return {'object': 'list', 'data': [{'id': i} for i in ids]}


def active(restarts=0, state='active', sub='running'):
    return [('ActiveState', state), ('SubState', sub), ('NRestarts', restarts)]


def gate(tmp_path, server, states, journal='', **args):
    """Run the module; return (rc, result, elapsed seconds)."""
    bindir = tmp_path / 'bin'
    bindir.mkdir(parents=True, exist_ok=True)
    for name, text in (('systemctl', SYSTEMCTL), ('journalctl', JOURNALCTL)):
        (bindir / name).write_text(text.format(python=sys.executable))
        (bindir / name).chmod(0o755)
    (tmp_path / 'states.json').write_text(json.dumps(states))
    (tmp_path / 'journal.txt').write_text(journal)
    params = {'unit': UNIT, 'served_model_name': MODEL, 'url': 'http://127.0.0.1:%d' % server.server_address[1],
              'timeout_s': 30, 'poll_interval_s': 0.05, 'request_timeout_s': 2}
    params.update(args)
    env = {'PATH': str(bindir) + os.pathsep + os.environ['PATH'], 'GATE_STATES': str(tmp_path / 'states.json'),
           'GATE_JOURNAL': str(tmp_path / 'journal.txt')}
    check_mode = params.pop('check_mode', False)
    start = time.time()
    rc, result = run_module('vllm_gate', params, env=env, tmp_path=tmp_path, check_mode=check_mode)
    return rc, result, time.time() - start


def serving(server):
    server.answers.update({'/health': [(200, {})], '/v1/models': [(200, models(MODEL))],
                           '/v1/completions': [(200, {'choices': [{'text': 'x'}]})]})


def test_ready_sends_the_api_key_and_one_short_completion(tmp_path, server):
    server.answers['/health'] = [(503, {}), (503, {}), (200, {})]
    server.answers['/v1/models'] = [(200, models('other')), (200, models(MODEL))]
    server.answers['/v1/completions'] = [(200, {'choices': [{'text': 'x'}]})]
    rc, res, dummy = gate(tmp_path, server, [active(2)], api_key=KEY)
    assert rc == 0, res
    assert res['ready'] is True and res['phase'] == 'ready' and res['n_restarts'] == 2
    assert set(res['timings']) == {'health_ok_s', 'models_ok_s', 'completion_latency_s', 'ready_s'}
    assert [r['path'] for r in server.requests][:3] == ['/health', '/health', '/health']
    assert all(r['auth'] == 'Bearer ' + KEY for r in server.requests)
    completions = [r for r in server.requests if r['path'] == '/v1/completions']
    assert len(completions) == 1 and completions[0]['method'] == 'POST'
    assert completions[0]['body'] == {'model': MODEL, 'prompt': 'ping', 'max_tokens': 1, 'temperature': 0}
    assert KEY not in json.dumps(res)
    argv = [json.loads(line) for line in (tmp_path / 'states.json.argv').read_text().splitlines()]
    assert argv[0] == ['show', UNIT, '--property=ActiveState,SubState,NRestarts']


def test_no_api_key_sends_no_authorization_header(tmp_path, server):
    serving(server)
    rc, res, dummy = gate(tmp_path, server, [active()], completion=False)
    assert rc == 0, res
    assert {r['auth'] for r in server.requests} == {None}
    assert '/v1/completions' not in [r['path'] for r in server.requests]


def test_restart_during_startup_fails_at_once_and_names_the_journal_cause(tmp_path, server):
    server.answers['/health'] = [(503, {})]
    journal = 'INFO loading\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n'
    rc, res, elapsed = gate(tmp_path, server, [active(0), active(0), active(1, 'activating', 'auto-restart')],
                            journal=journal, baseline_restarts=0, timeout_s=60)
    assert rc == 1
    assert res['msg'] == ('inkling-vllm.service: unit restarted during startup (NRestarts=1, was 0 at gate start). '
                          'Cause found in the journal: GPU out of memory: lower --gpu-memory-utilization or '
                          '--max-model-len, or pin --kv-cache-memory-bytes')
    assert res['ready'] is False and res['cause'] == 'GPU out of memory'
    assert res['journal_tail'] == journal.splitlines()
    assert elapsed < 30
    assert (tmp_path / 'states.json.journalctl').read_text() == '--no-pager -o cat -n 200 -u ' + UNIT


def test_a_stale_baseline_hides_the_restart(tmp_path, server):
    """What the rollout did before reading NRestarts after reset-failed: baseline 3, counter reset to 0."""
    serving(server)
    rc, res, dummy = gate(tmp_path, server, [active(0), active(1)], baseline_restarts=3, completion=False)
    assert rc == 0 and res['ready']


def test_wrong_api_key_fails_at_once(tmp_path, server):
    serving(server)
    server.answers['/v1/models'] = [(401, {'error': 'Unauthorized'})]
    rc, res, elapsed = gate(tmp_path, server, [active()], api_key='wrong', timeout_s=60)
    assert rc == 1
    assert res['msg'] == 'inkling-vllm.service: /v1/models answered HTTP 401 (expected 200 listing inkling)'
    assert res['phase'] == 'failed' and res['cause'] is None
    assert elapsed < 30


def test_unit_failed_and_unparsable_systemctl(tmp_path, server):
    server.answers['/health'] = [(503, {})]
    rc, res, dummy = gate(tmp_path, server, [active(0), active(0, 'failed', 'failed')])
    assert rc == 1 and res['msg'] == 'inkling-vllm.service: unit entered the failed state (failed/failed)'
    # systemctl failing or printing no NRestarts: no restart counter, the deadline still applies.
    rc, res, dummy = gate(tmp_path / 'no-bus', server, [None], timeout_s=1)
    assert rc == 1 and res['n_restarts'] is None
    assert res['msg'] == 'inkling-vllm.service: not ready after 1 s: the server never answered /health with 200'


def test_check_mode_reads_the_unit_and_makes_no_request(tmp_path, server):
    serving(server)
    rc, res, dummy = gate(tmp_path, server, [active(4)], check_mode=True)
    assert rc == 0
    assert res['ready'] is True and res['phase'] == 'not run (check mode)' and res['n_restarts'] == 4
    assert server.requests == []
    rc, res, dummy = gate(tmp_path, server, [active(0, 'inactive', 'dead')], check_mode=True)
    assert res['ready'] is False


# -- rounds (the action plugin's progress lines) ---------------------------------------------------

def test_a_round_ends_with_the_state_and_the_next_round_goes_on_from_it(tmp_path, server):
    server.answers['/health'] = [(200, {})]
    server.answers['/v1/models'] = [(200, models('other'))]
    rc, res, elapsed = gate(tmp_path, server, [active()], round_s=0.3, timeout_s=30)
    assert rc == 0 and res['decision'] == 'continue' and res['ready'] is False, res
    assert res['state']['health_seen_ok'] is True and res['state']['phase'] == 'health_ok'
    assert res['awaiting'] == '/v1/models to list inkling'
    assert res['last'] == 'unit active/running, /health HTTP 200, /v1/models HTTP 200'
    assert elapsed < 10
    # The next round remembers /health had answered 200: a 503 now means the engine died.
    server.answers['/health'] = [(503, {})]
    rc2, res2, dummy = gate(tmp_path / 'r2', server, [active()], round_s=5, state=res['state'],
                            elapsed_offset_s=res['elapsed_s'], timeout_s=30)
    assert rc2 == 1
    assert '/health answered 503 after it had answered 200: the engine died' in res2['msg']


PLAY = '''- hosts: localhost
  gather_facts: false
  tasks:
    - name: Gate
      inkling.fleet.vllm_gate:
        unit: {unit}
        url: http://127.0.0.1:{port}
        served_model_name: {model}
        timeout_s: 30
        poll_interval_s: 0.05
        completion: false
        progress_interval_s: 0.4
      register: gated
    - name: Show
      ansible.builtin.debug:
        msg: "ROUNDS={{{{ gated.rounds }}}} READY={{{{ gated.ready }}}}"
'''


def test_the_action_plugin_prints_a_progress_line_per_round_and_decides_like_one_run(tmp_path, server):
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    server.answers['/health'] = [(503, {})] * 25 + [(200, {})]
    server.answers['/v1/models'] = [(200, models(MODEL))]
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'systemctl').write_text(SYSTEMCTL.format(python=sys.executable))
    (bindir / 'systemctl').chmod(0o755)
    (tmp_path / 'states.json').write_text(json.dumps([active()]))
    (tmp_path / 'play.yml').write_text(PLAY.format(unit=UNIT, port=server.server_address[1], model=MODEL))
    env = dict(os.environ, PATH=str(bindir) + os.pathsep + os.environ['PATH'], GATE_STATES=str(tmp_path / 'states.json'),
               ANSIBLE_CONFIG=os.path.join(repo, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,', '-c',
                           'local', '-e', 'ansible_python_interpreter=' + sys.executable, str(tmp_path / 'play.yml')],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith('localhost - gate: ')]
    assert len(lines) >= 2, proc.stdout
    assert lines[0].endswith('of 30s, awaiting /health to answer 200; last: unit active/running, /health HTTP 503')
    rounds = int(proc.stdout.split('ROUNDS=')[1].split()[0])
    assert rounds == len(lines) + 1 and 'READY=True' in proc.stdout
