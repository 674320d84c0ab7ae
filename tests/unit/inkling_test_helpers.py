# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Shared test helpers: fixture loading, a fake nvidia-smi runner, a fake nvidia-smi script, module runs."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import xml.etree.ElementTree as ET

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import nvidia_smi

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(REPO, 'collections')
FIXTURES = os.path.join(HERE, 'fixtures', 'nvidia-smi')
CAPTURE = os.path.join(FIXTURES, 'h200-2gpu-driver580')
VARIANTS_YML = os.path.join(REPO, 'data', 'variants.yml')
STANDIN = os.path.join(REPO, 'lab', 'nvidia-smi', 'nvidia-smi')
PROFILES = os.path.join(REPO, 'lab', 'nvidia-smi', 'profiles')
VLLM_STANDIN = os.path.join(REPO, 'lab', 'standin', 'vllm')


# Under CI (CI=true, as CI systems set it) a missing program fails the tests that need it:
# scripts/setup.sh installs every one, and a silent skip would hide that it did not.
ON_CI = os.environ.get('CI', '').lower() == 'true'


def needs_program(name):
    """skipif marker: skip when NAME is not on PATH, except under CI=true where the tests run (and fail)."""
    return pytest.mark.skipif(shutil.which(name) is None and not ON_CI,
                              reason='%s is not installed (scripts/setup.sh installs it; under CI=true this fails)'
                                     % name)


def read(path):
    with open(path) as handle:
        return handle.read()


def capture_text(name):
    return read(os.path.join(CAPTURE, name))


def capture_rows():
    """Rows of the real 2x H200 capture, keyed by query field, units stripped.

    query-gpu.csv has most fields; mig.mode.pending, remapped rows, the recovery action and fabric
    come from the same host's nvidia-smi-q.xml.
    """
    lines = capture_text('query-gpu.csv').strip().splitlines()
    fields = [re.sub(r'\s*\[.*\]$', '', h.strip()) for h in lines[0].split(',')]
    rows = []
    for line in lines[1:]:
        values = [re.sub(r' (MiB|W|MHz)$', '', v.strip()) for v in line.split(',')]
        rows.append(dict(zip(fields, values)))
    tree = ET.parse(os.path.join(CAPTURE, 'nvidia-smi-q.xml'))
    for row, gpu in zip(rows, tree.getroot().findall('gpu')):
        row['mig.mode.pending'] = gpu.find('mig_mode/pending_mig').text
        row['remapped_rows.pending'] = gpu.find('remapped_rows/remapped_row_pending').text
        row['remapped_rows.failure'] = gpu.find('remapped_rows/remapped_row_failure').text
        row['remapped_rows.correctable'] = gpu.find('remapped_rows/remapped_row_corr').text
        row['remapped_rows.uncorrectable'] = gpu.find('remapped_rows/remapped_row_unc').text
        row['gpu_recovery_action'] = gpu.find('gpu_recovery_action').text
        row['fabric.state'] = gpu.find('fabric/state').text
        row['fabric.status'] = gpu.find('fabric/status').text
    return rows


def podman_error_sections(name):
    """{title: output} of a capture in fixtures/podman-errors (### title, then the output up to rc=)."""
    text = read(os.path.join(HERE, 'fixtures', 'podman-errors', name))
    out = {}
    for block in text.split('### ')[1:]:
        title, _sep, body = block.partition('\n')
        out[title.strip()] = body.split('\nrc=', 1)[0]
    return out


def synth_rows(template, count, uuid_prefix='GPU-00000000-0000-0000-0000-0000000000'):
    """A synthesized table: the template row repeated with distinct index, UUID and bus id (not a capture)."""
    rows = []
    for index in range(count):
        row = dict(template)
        row['index'] = str(index)
        row['uuid'] = '%s%02d' % (uuid_prefix, index)
        row['pci.bus_id'] = '00000000:%02X:00.0' % (0x10 + index * 0x10)
        rows.append(row)
    return rows


def h200_rows(count=8):
    return synth_rows(capture_rows()[0], count)


def public_rows(name, count=8, **override):
    values = json.loads(read(os.path.join(FIXTURES, 'public', 'public-values.json')))[name]
    template = dict(values['filled_not_in_source'])
    template.update(values['gpu'])
    template['driver_version'] = values['driver_version']
    template.update(override)
    return synth_rows(template, count)


class FakeSmi(object):
    """A runner for nvidia_smi.collect answering from rows (dicts of raw strings keyed by query field)."""

    def __init__(self, rows, unsupported=(), cuda='13.0', failure=None, nvlink_text=None, topo_text=None,
                 lspci_text=None):
        self.rows = rows
        self.unsupported = set(unsupported)
        self.cuda = cuda
        self.failure = failure  # (rc, stdout) answered to every nvidia-smi call
        self.nvlink_text = nvlink_text
        self.topo_text = topo_text
        self.lspci_text = lspci_text
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        if argv[0].endswith('lspci'):
            return (0, self.lspci_text, '') if self.lspci_text is not None else (1, '', 'lspci: failed')
        if self.failure:
            return self.failure[0], self.failure[1], ''
        args = argv[1:]
        if args[0].startswith('--query-gpu='):
            fields = args[0].split('=', 1)[1].split(',')
            for field in fields:
                if field in self.unsupported:
                    return 2, 'Field "%s" is not a valid field to query.\n' % field, ''
            return 0, ''.join(', '.join(row.get(f, '[N/A]') for f in fields) + '\n' for row in self.rows), ''
        if args == ['--version']:
            driver = self.rows[0].get('driver_version', '') if self.rows else ''
            text = 'NVIDIA-SMI version  : %s\nDRIVER version      : %s\n' % (driver, driver)
            if self.cuda:
                text += 'CUDA Version        : %s\n' % self.cuda
            return 0, text, ''
        if args == ['nvlink', '-s']:
            return (0, self.nvlink_text, '') if self.nvlink_text is not None else (3, '', 'nvlink failed')
        if args == ['topo', '-m']:
            return (0, self.topo_text, '') if self.topo_text is not None else (3, '', 'topo failed')
        raise AssertionError('unexpected nvidia-smi call %r' % argv)


def facts_from_rows(rows, **kwargs):
    facts, _warnings = nvidia_smi.collect('nvidia-smi', runner=FakeSmi(rows, **kwargs), nvlink=False)
    return facts


def default_table():
    data = yaml.safe_load(read(VARIANTS_YML))
    return data['variants'], data['schema_version']


FAKE_SCRIPT = textwrap.dedent('''\
    #!{python}
    # A fake nvidia-smi written by the unit tests: answers --query-gpu from ROWS, or MODE.
    import json, sys, time
    ROWS = json.loads({rows!r})
    UNSUPPORTED = {unsupported!r}
    MODE = {mode!r}
    args = sys.argv[1:]
    if MODE == 'hang':
        time.sleep(60)
    if MODE == 'mismatch':
        print('Failed to initialize NVML: Driver/library version mismatch')
        print('NVML library version: 460.73')
        sys.exit({mismatch_rc})
    if MODE == 'no-gpu':
        print('No devices were found')
        sys.exit(6)
    if args and args[0].startswith('--query-gpu='):
        fields = args[0].split('=', 1)[1].split(',')
        for field in fields:
            if field in UNSUPPORTED:
                print('Field "%s" is not a valid field to query.' % field)
                sys.exit(2)
        for row in ROWS:
            print(', '.join(row.get(f, '[N/A]') for f in fields))
        sys.exit(0)
    if args == ['--version']:
        print('NVIDIA-SMI version  : 580.159.04')
        print('CUDA Version        : 13.0')
        sys.exit(0)
    if args in (['nvlink', '-s'], ['topo', '-m']):
        sys.stdout.write(open({capture!r} + ('/nvlink.txt' if args[0] == 'nvlink' else '/topo.txt')).read())
        sys.exit(0)
    sys.stderr.write('fake nvidia-smi: unexpected %r' % args)
    sys.exit(2)
''')


def write_fake_smi(directory, rows=(), unsupported=(), mode=None, mismatch_rc=0, name='nvidia-smi'):
    path = os.path.join(str(directory), name)
    with open(path, 'w') as handle:
        handle.write(FAKE_SCRIPT.format(python=sys.executable, rows=json.dumps(list(rows)),
                                        unsupported=list(unsupported), mode=mode, mismatch_rc=mismatch_rc,
                                        capture=CAPTURE))
    os.chmod(path, 0o755)
    return path


def run_module(name, args, env=None, tmp_path=None, check_mode=False):
    """Run a module of the collection the way Ansible does (a process reading its args file); return (rc, result)."""
    module_args = dict(args)
    if check_mode:
        module_args['_ansible_check_mode'] = True
    args_file = os.path.join(str(tmp_path), 'args-%s.json' % name)
    with open(args_file, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': module_args}, handle)
    run_env = dict(os.environ)
    run_env['PYTHONPATH'] = COLLECTIONS + os.pathsep + run_env.get('PYTHONPATH', '')
    run_env.update(env or {})
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'plugins', 'modules', name + '.py'), args_file],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env, timeout=120, check=False)
    try:
        result = json.loads(proc.stdout.decode())
    except ValueError:
        raise AssertionError('module %s printed no JSON: stdout=%r stderr=%r' % (name, proc.stdout, proc.stderr))
    return proc.returncode, result


def standin_hub(root, repo_id, rev):
    """A hub cache under ``root``/hub for the lab's vLLM stand-in: ``repo_id`` at ``rev``
    (refs/main -> rev), a config, an index and two shards. Returns the hub directory."""
    repo = root / 'hub' / ('models--' + repo_id.replace('/', '--'))
    snap = repo / 'snapshots' / rev
    (repo / 'blobs').mkdir(parents=True)
    (repo / 'refs').mkdir()
    snap.mkdir(parents=True)
    (repo / 'refs' / 'main').write_text(rev)
    files = {'config.json': '{"model_type": "inkling"}',
             'model.safetensors.index.json': json.dumps({'weight_map': {'a': 'model-1.safetensors',
                                                                        'b': 'model-2.safetensors'}}),
             'model-1.safetensors': 'x', 'model-2.safetensors': 'y'}
    for i, (name, text) in enumerate(sorted(files.items())):
        blob = repo / 'blobs' / ('%064d' % i)
        blob.write_text(text)
        (snap / name).symlink_to(os.path.join('..', '..', 'blobs', blob.name))
    return root / 'hub'


_PORTS_GIVEN = set()


def free_port():
    """A loopback TCP port free right now and not handed out before in this test run.

    The port is closed again before a server binds it, so two servers started one after the other
    could be handed the same port; the second would then fail to bind. Remembering the ports handed
    out rules that out within one pytest process."""
    while True:
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


class VllmStandin(object):
    """lab/standin/vllm serving ``repo_id`` (a snapshot under ``hub``) as ``model`` on a free loopback port."""

    def __init__(self, hub, cache, env, repo_id, model):
        self.port = free_port()
        e = dict((k, v) for k, v in os.environ.items() if not k.startswith(('STANDIN_', 'VLLM_', 'HF_')))
        e.update({'HF_HUB_CACHE': str(hub), 'VLLM_CACHE_ROOT': str(cache), 'HF_HUB_OFFLINE': '1'})
        e.update(env)
        argv = [sys.executable, VLLM_STANDIN, 'serve', '--model', repo_id, '--served-model-name', model,
                '--host', '127.0.0.1', '--port', str(self.port)]
        self.proc = subprocess.Popen(argv, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while time.time() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(('127.0.0.1', self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError('the stand-in (%r) did not open port %d' % (env, self.port))

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.port

    def chat_requests(self):
        """POSTs the stand-in counted (its standin_requests_total)."""
        with urllib.request.urlopen(self.url + '/metrics', timeout=5) as r:
            text = r.read().decode()
        return int(next(line.split()[1] for line in text.splitlines() if line.startswith('standin_requests_total')))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


LOCAL_INVENTORY = '''all:
  hosts:
%s
  vars:
    ansible_connection: local
    ansible_python_interpreter: %s
'''


def run_local_play(tmp_path, hosts, play, env=None, report_dir='reports'):
    """Run ``play`` (a playbook's text) with ansible-playbook against ``hosts`` on this machine (connection
    local, the repository's ansible.cfg), ``env`` added to the environment; it must succeed. Returns the
    journal (``report_dir``/journal.json) the play's rollout_journal calls wrote."""
    (tmp_path / 'inventory.yml').write_text(LOCAL_INVENTORY % (
        '\n'.join('    %s: {}' % h for h in hosts), sys.executable))
    (tmp_path / 'play.yml').write_text(play)
    full = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    full.update(env or {})
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(tmp_path / 'inventory.yml'),
            str(tmp_path / 'play.yml')]
    proc = subprocess.run(argv, cwd=REPO, env=full, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / report_dir / 'journal.json').read_text())
