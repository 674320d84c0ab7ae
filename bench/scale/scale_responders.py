# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The host side of bench/rollout_scale.py: what a simulated GPU host answers to each module run.

The connection plugin ``inkling_replay`` (connection_plugins/ beside this file) hands every command
Ansible would run on a host to :func:`exec_command`. A module payload (AnsiballZ, sent on stdin with
pipelining) is answered by the responder of that module, from

- the host's own state (``hosts/<host>.json`` in the state directory): the files the rollout wrote (unit,
  state record, auth file, image record), the podman secret, the unit's state, the images and snapshot
  blobs held, the compile cache sets. A run changes it the way the real module would change the host, so a
  second run sees what the first one left;
- fixtures recorded once per benchmark run by scale_fixtures.py (the GPU facts of the lab's H200 capture,
  the host facts of an HGX H200 board, the hub's file list, systemd's properties of the unit);
- the collection's own code where the module only decides from its arguments: ``inkling_variant`` and
  ``preflight_evaluate`` run as real module processes (cached by arguments), the gate, the canary analysis,
  the re-check, the image trial's verdict and the page-cache decision call the module_utils the modules call.

Gates pass at once (every probe answers 200 at the first poll). Anything not simulated (a download, a pull)
answers a module failure naming it, and is logged to ``problems.log``.

Every call appends one line (module, host, CPU seconds spent here) to ``sim-cpu.log``, so that the benchmark
can subtract the simulation's own CPU from the controller's.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import ast
import base64
import datetime
import fcntl
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(REPO, 'collections')
MODULES = os.path.join(REPO, 'plugins', 'modules')

HOST_TOKEN = '@@SIM_HOST@@'
NO_LOG = 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'
# Arguments the modules declare no_log (masked in `invocation` as AnsibleModule masks them).
NO_LOG_ARGS = {
    'podman_secret': ('data',),
    'compile_cache': ('token',),
    'vllm_gate': ('api_key',),
    'vllm_analysis': ('api_key',),
    'registry_login': ('password',),
}
WRAPPER_MARK = b'_ansiballz_main(\n'


class Unsimulated(Exception):
    """A module or command this benchmark does not simulate."""


# ---------------------------------------------------------------- the payload

def parse_payload(data):
    """(module short name, fqn, args) from an AnsiballZ wrapper, or None when ``data`` is not one."""
    if not data:
        return None
    start = data.rfind(WRAPPER_MARK)
    if start < 0:
        return None
    fields = {}
    pos = start + len(WRAPPER_MARK)
    while True:
        end = data.find(b'\n', pos)
        line = data[pos:end if end >= 0 else len(data)]
        pos = end + 1
        if line.startswith(b'zip_data=') or end < 0 or line.startswith(b')'):
            break
        key, sep, value = line.partition(b'=')
        if sep and key in (b'ansible_module', b'module_fqn', b'params'):
            fields[key.decode()] = ast.literal_eval(value.decode('utf-8').rstrip(','))
    fqn = fields.get('module_fqn') or fields.get('ansible_module') or ''
    params = json.loads(fields.get('params') or '{}').get('ANSIBLE_MODULE_ARGS', {})
    return fqn.rsplit('.', 1)[-1], fqn, params


def public_args(args):
    return dict((k, v) for k, v in args.items() if not k.startswith('_ansible_'))


def invocation(name, args):
    masked = public_args(args)
    for key in NO_LOG_ARGS.get(name, ()):
        if masked.get(key) is not None:
            masked[key] = NO_LOG
    return {'module_args': masked}


# ---------------------------------------------------------------- state

def _read_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return default


def write_json(path, data):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-')
    with os.fdopen(fd, 'w') as handle:
        json.dump(data, handle, sort_keys=True)
    os.rename(tmp, path)


def host_path(state_dir, host):
    return os.path.join(state_dir, 'hosts', host + '.json')


class Context(object):
    """One call: the state directory, the host, its state and the fixtures (read lazily)."""

    def __init__(self, state_dir, host, puts):
        self.state_dir = state_dir
        self.host = host
        self.puts = puts
        self._state = None
        self._fixtures = None
        self.dirty = False

    @property
    def state(self):
        if self._state is None:
            self._state = _read_json(host_path(self.state_dir, self.host))
            if self._state is None:
                raise Unsimulated('no simulated host %s in %s (the benchmark seeds every host first)'
                                  % (self.host, self.state_dir))
        return self._state

    @property
    def fixtures(self):
        if self._fixtures is None:
            self._fixtures = _read_json(os.path.join(self.state_dir, 'fixtures.json'))
            if self._fixtures is None:
                raise Unsimulated('no fixtures.json in %s' % self.state_dir)
        return self._fixtures

    def save(self):
        if self.dirty:
            write_json(host_path(self.state_dir, self.host), self._state)


def address_of(name):
    """The fleet address of a simulated host (sim-h200-0513 is 10.40.2.1), or the name itself."""
    match = re.match(r'^sim-[a-z0-9]+-(\d+)$', name)
    if not match:
        return name
    number = int(match.group(1))
    return '10.40.%d.%d' % (number // 256, number % 256)


def now_iso():
    return datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')


def digests(text):
    raw = text.encode('utf-8')
    return {'sha1': hashlib.sha1(raw).hexdigest(), 'sha256': hashlib.sha256(raw).hexdigest(),
            'md5': hashlib.md5(raw).hexdigest(), 'size': len(raw)}


# ---------------------------------------------------------------- real module code

def _collection_import(name):
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    __import__(name)
    return sys.modules[name]


def module_utils(name):
    return _collection_import('ansible_collections.inkling.fleet.plugins.module_utils.' + name)


def cached(ctx, name, args, compute):
    """compute() once per distinct arguments (the host's name taken out), kept in cache/ for every host. The hosts
    of a task ask at the same time: one computes, the others wait for its answer."""
    text = json.dumps(public_args(args), sort_keys=True).replace(ctx.host, HOST_TOKEN)
    key = '%s-%s' % (name, hashlib.sha1(text.encode('utf-8')).hexdigest())
    path = os.path.join(ctx.state_dir, 'cache', key + '.json')
    entry = _read_json(path)
    if entry is None:
        lock = os.open(path + '.lock', os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entry = _read_json(path)
            if entry is None:
                rc, result = compute()
                entry = {'rc': rc, 'result': json.loads(json.dumps(result).replace(ctx.host, HOST_TOKEN))}
                write_json(path, entry)
        finally:
            os.close(lock)
    result = json.loads(json.dumps(entry['result']).replace(HOST_TOKEN, ctx.host))
    return entry['rc'], result


def run_real_module(name, args):
    """Run plugins/modules/<name>.py as Ansible runs a module (a process reading its arguments)."""
    fd, args_file = tempfile.mkstemp(prefix='inkling-scale-args-')
    with os.fdopen(fd, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': dict(args)}, handle)
    env = dict(os.environ)
    env['PYTHONPATH'] = COLLECTIONS + os.pathsep + env.get('PYTHONPATH', '')
    try:
        proc = subprocess.run([sys.executable, os.path.join(MODULES, name + '.py'), args_file], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)
    finally:
        os.unlink(args_file)
    out = proc.stdout.decode('utf-8', 'replace')
    try:
        result = json.loads(out[out.index('{'):])
    except ValueError:
        raise Unsimulated('module %s printed no JSON (rc %s): %s' % (name, proc.returncode, proc.stderr[-500:]))
    return proc.returncode, result


def real_module(ctx, name, args):
    return cached(ctx, name, args, lambda: run_real_module(name, args))


# ---------------------------------------------------------------- builtins: files

def _file_entry(ctx, path):
    return ctx.state.setdefault('files', {}).get(path)


def _snapshot_link(ctx, path):
    """(blob etag) when path is a file of a held snapshot (a link into blobs/), else None."""
    match = re.match(r'^(.*)/models--([^/]+)--([^/]+)/snapshots/([0-9a-f]{40})/(.+)$', path)
    if not match:
        return None
    repo = '%s/%s@%s' % (match.group(2), match.group(3), match.group(4))
    return (ctx.state.get('snapshots') or {}).get(repo, {}).get(match.group(5))


def stat_result(ctx, args):
    path = args.get('path')
    algo = args.get('checksum_algorithm') or 'sha1'
    entry = _file_entry(ctx, path)
    link = None if entry else _snapshot_link(ctx, path)
    isdir = path in (ctx.state.get('dirs') or [])
    if entry is None and link is None and not isdir:
        return 0, {'changed': False, 'stat': {'exists': False}}
    mtime = float(entry.get('mtime', 1767225600.0)) if entry else 1767225600.0
    if entry:
        mode, size, kind = entry.get('mode', '0644'), digests(entry['content'])['size'], 'file'
    elif link:
        mode, size, kind = '0777', len('../../blobs/' + link), 'link'
    else:
        mode, size, kind = entry_mode(ctx, path), 4096, 'dir'
    perms = int(mode, 8)
    out = {
        'exists': True, 'path': path, 'mode': mode, 'isdir': kind == 'dir', 'ischr': False, 'isblk': False,
        'isreg': kind == 'file', 'isfifo': False, 'islnk': kind == 'link', 'issock': False, 'uid': 0, 'gid': 0,
        'size': size, 'inode': int(hashlib.sha1(path.encode()).hexdigest()[:7], 16), 'dev': 2049, 'nlink': 1,
        'atime': mtime, 'mtime': mtime, 'ctime': mtime,
        'wusr': bool(perms & 0o200), 'rusr': bool(perms & 0o400), 'xusr': bool(perms & 0o100),
        'wgrp': bool(perms & 0o020), 'rgrp': bool(perms & 0o040), 'xgrp': bool(perms & 0o010),
        'woth': bool(perms & 0o002), 'roth': bool(perms & 0o004), 'xoth': bool(perms & 0o001),
        'isuid': False, 'isgid': False, 'blocks': 8, 'block_size': 4096, 'device_type': 0,
        'readable': True, 'writeable': True, 'executable': kind == 'dir',
        'pw_name': 'root', 'gr_name': 'root', 'attributes': [], 'version': None,
    }
    if kind == 'link':
        out['lnk_source'] = '%s/blobs/%s' % (path.split('/snapshots/')[0], link)
        out['lnk_target'] = '../../blobs/' + link
    if kind == 'file' and args.get('get_checksum', True):
        out['checksum'] = digests(entry['content'])[algo]
    if args.get('get_mime', True):
        out['mimetype'] = 'inode/directory' if kind == 'dir' else 'text/plain'
        out['charset'] = 'binary' if kind == 'dir' else 'us-ascii'
    return 0, {'changed': False, 'stat': out}


def entry_mode(ctx, path):
    return (ctx.state.get('dir_modes') or {}).get(path, '0755')


def file_attrs(path, mode, state, size):
    return {'path': path, 'mode': mode, 'owner': 'root', 'group': 'root', 'uid': 0, 'gid': 0,
            'state': state, 'size': size}


def file_result(ctx, args):
    path = args.get('path') or args.get('dest')
    state = args.get('state')
    entry = _file_entry(ctx, path)
    dirs = ctx.state.setdefault('dirs', [])
    if state is None:
        state = 'directory' if path in dirs else 'file'
    if state == 'directory':
        mode = args.get('mode') or '0755'
        changed = path not in dirs or entry_mode(ctx, path) != mode
        if changed:
            if path not in dirs:
                dirs.append(path)
            ctx.state.setdefault('dir_modes', {})[path] = mode
            ctx.dirty = True
        return 0, dict(file_attrs(path, mode, 'directory', 4096), changed=changed)
    if state == 'file':
        if entry is None:
            return 1, {'failed': True, 'path': path, 'changed': False, 'state': 'absent',
                       'msg': 'file (%s) is absent, cannot continue' % path}
        mode = args.get('mode') or entry.get('mode', '0644')
        changed = mode != entry.get('mode', '0644')
        if changed:
            entry['mode'] = mode
            ctx.dirty = True
        return 0, dict(file_attrs(path, mode, 'file', digests(entry['content'])['size']), changed=changed)
    if state == 'absent':
        changed = entry is not None or path in dirs
        if entry is not None:
            del ctx.state['files'][path]
        if path in dirs:
            dirs.remove(path)
        ctx.dirty = ctx.dirty or changed
        return 0, {'path': path, 'changed': changed, 'state': 'absent'}
    raise Unsimulated('file state=%s' % state)


def copy_result(ctx, args):
    src, dest = args.get('src'), args.get('dest')
    if src not in ctx.puts:
        raise Unsimulated('copy of %s: no file was transferred to %s in this task' % (dest, src))
    content = ctx.puts[src].decode('utf-8')
    before = _file_entry(ctx, dest)
    mode = args.get('mode') or (before or {}).get('mode') or '0644'
    changed = before is None or before['content'] != content or before.get('mode') != mode
    if changed:
        ctx.state['files'][dest] = {'content': content, 'mode': mode, 'mtime': round(time.time(), 6)}
        ctx.dirty = True
    sums = digests(content)
    return 0, dict(file_attrs(dest, mode, 'file', sums['size']), changed=changed, dest=dest, src=src,
                   md5sum=sums['md5'], checksum=sums['sha1'])


def slurp_result(ctx, args):
    path = args.get('src') or args.get('path')
    entry = _file_entry(ctx, path)
    if entry is None:
        return 1, {'failed': True, 'msg': 'file not found: %s' % path}
    return 0, {'changed': False, 'source': path, 'encoding': 'base64',
               'content': base64.b64encode(entry['content'].encode('utf-8')).decode('ascii')}


# ---------------------------------------------------------------- builtins: systemd and commands

def unit_status(ctx, unit):
    service = ctx.state.setdefault('service', {})
    status = dict((k, v.replace('@@UNIT@@', unit)) for k, v in ctx.fixtures['systemd_show'].items())
    active = bool(service.get('active'))
    status.update(ActiveState='active' if active else 'inactive', SubState='running' if active else 'dead',
                  NRestarts=str(service.get('n_restarts', 0)), MainPID=str(service.get('main_pid', 0) if active else 0),
                  ExecMainPID=str(service.get('main_pid', 0) if active else 0),
                  LoadState='loaded' if _unit_file(ctx) else 'not-found')
    return status


def _unit_file(ctx):
    return ctx.state.get('unit_path') and _file_entry(ctx, ctx.state['unit_path'])


def start_service(ctx):
    """The unit starts: a new main process; the server fills its compile cache set when it is empty
    (what the lab's stand-in writes under VLLM_CACHE_ROOT)."""
    service = ctx.state.setdefault('service', {})
    service['active'] = True
    service['main_pid'] = int(service.get('main_pid', 4000)) + 17
    cache_dir = service.get('cache_dir')
    sets = ctx.state.setdefault('cache_sets', {})
    if cache_dir and not (sets.get(cache_dir) or {}).get('files'):
        sets.setdefault(cache_dir, {})['files'] = ctx.fixtures['compile_cache_files']
    ctx.dirty = True


def systemd_result(ctx, args):
    unit = args.get('name') or args.get('unit')
    result = {'name': unit, 'changed': False, 'status': {}}
    if not unit:
        return 0, result
    if not _unit_file(ctx):
        return 1, dict(result, failed=True, msg='Could not find the requested service %s: host' % unit)
    result['status'] = unit_status(ctx, unit)
    state = args.get('state')
    active = result['status']['ActiveState'] == 'active'
    if state:
        result['state'] = state
        if state == 'started' and not active:
            start_service(ctx)
            result['changed'] = True
        elif state == 'stopped' and active:
            ctx.state['service']['active'] = False
            ctx.dirty = True
            result['changed'] = True
        elif state in ('restarted', 'reloaded'):
            start_service(ctx)
            result['state'] = 'started'
            result['changed'] = True
    if args.get('enabled') is not None:
        result['enabled'] = bool(args['enabled'])
    return 0, result


def _systemctl(ctx, argv):
    unit = next((a for a in argv[2:] if not a.startswith('-')), '')
    verb = argv[1] if len(argv) > 1 else ''
    service = ctx.state.setdefault('service', {})
    if verb == 'is-active':
        return (0, 'active\n', '') if service.get('active') else (3, 'inactive\n', '')
    if verb in ('reset-failed', 'daemon-reload', 'enable'):
        return 0, '', ''
    if verb == 'is-enabled':
        return 0, 'generated\n', ''
    if verb in ('start', 'restart'):
        if verb == 'restart' or not service.get('active'):
            start_service(ctx)
        return 0, '', ''
    if verb == 'stop':
        service['active'] = False
        ctx.dirty = True
        return 0, '', ''
    if verb == 'cat':
        if not _unit_file(ctx):
            return 1, '', 'No files found for %s.\n' % unit
        return 0, '# /run/systemd/generator/%s\n%s' % (unit, ctx.state.get('unit_generated', '')), ''
    if verb == 'show':
        props = [a.split('=', 1)[1] for a in argv if a.startswith('--property=')]
        names = [n for p in props for n in p.split(',')]
        status = unit_status(ctx, unit)
        if '--value' in argv:
            return 0, ''.join('%s\n' % status.get(n, '') for n in names), ''
        return 0, ''.join('%s=%s\n' % (n, status.get(n, '')) for n in names), ''
    raise Unsimulated('systemctl %s' % verb)


def command_result(ctx, args):
    argv = args.get('argv') or shlex.split(args.get('cmd') or args.get('_raw_params') or '')
    start = now_iso()
    if argv[:1] == ['systemctl']:
        rc, out, err = _systemctl(ctx, argv)
    elif argv[:3] == ['podman', 'image', 'exists']:
        rc, out, err = (0, '', '') if argv[3] in (ctx.state.get('images') or []) else (1, '', '')
    else:
        raise Unsimulated('command %s' % ' '.join(argv[:3]))
    result = {'changed': True, 'stdout': out.rstrip('\n'), 'stderr': err.rstrip('\n'), 'rc': rc, 'cmd': argv,
              'start': start, 'end': now_iso(), 'delta': '0:00:00.006021', 'msg': ''}
    if rc != 0:
        result.update(failed=True, msg='non-zero return code')
    return (1 if rc else 0), result


# ---------------------------------------------------------------- the collection's modules

def unit_run_result(ctx, args):
    """The real UnitRun (module_utils/systemd.py) over the simulated systemctl."""
    sd = module_utils('systemd')
    worker = sd.UnitRun(args.get('host') or ctx.host, sd.Systemctl(lambda argv: _systemctl(ctx, argv)),
                        sleep=lambda seconds: None)
    try:
        return 0, worker.run(args['unit'], args.get('state') or 'started', args.get('enabled'),
                             bool(args.get('daemon_reload')), int(args.get('wait_s') or 0),
                             journal_lines=int(args.get('journal_lines') or 40),
                             check_mode=bool(args.get('_ansible_check_mode')))
    except sd.UnitRunError as exc:
        return 1, dict(exc.result, failed=True, msg=str(exc))


def rollout_unit_state_result(ctx, args):
    """The unit's checksum (sha256, '' without the file) and systemctl is-active, as the module reads them."""
    entry = _file_entry(ctx, args.get('unit_path'))
    active = bool(ctx.state.setdefault('service', {}).get('active'))
    return 0, {'changed': False, 'unit_checksum': digests(entry['content'])['sha256'] if entry else '',
               'active_state': 'active' if active else 'inactive', 'active': active}


def nvidia_gpu_info_result(ctx, args):
    return 0, json.loads(json.dumps(ctx.fixtures['nvidia_gpu_info']))


def host_facts_result(ctx, args):
    facts = json.loads(json.dumps(ctx.fixtures['host_facts']))
    blobs = ctx.state.get('blobs') or {}
    facts['hub_cache_model_bytes'] = sum(blobs.values())
    staging = args.get('staging_files')
    if staging is not None and args.get('model'):
        facts['hub_cache_staging_missing_bytes'] = sum(
            int(f['size']) for f in dict((f['etag'], f) for f in staging if f.get('etag')).values()
            if blobs.get(f['etag']) != f['size'])
    return 0, {'changed': False, 'host_facts': facts}


def hf_snapshot_result(ctx, args):
    if args.get('phase') != 'plan' or not args.get('local_only'):
        raise Unsimulated('hf_snapshot phase=%s: staging from the hub is not simulated (hosts hold the snapshot)'
                          % args.get('phase'))
    repo, rev = args['repo_id'], args['revision']
    rdir = '%s/models--%s' % (args['cache_dir'].rstrip('/'), repo.replace('/', '--'))
    pre = {'cache_dir_changes': []}
    if args.get('report_venv'):
        pre['venv_huggingface_hub_version'] = ctx.state.get('venv_huggingface_hub_version', '')
        pre['venv_problem'] = ''
    if args.get('report_address'):
        pre['address'] = address_of(ctx.host)
    files = (ctx.state.get('snapshots') or {}).get('%s@%s' % (repo, rev))
    if not files:
        return 0, dict(pre, changed=False, complete=False, revision=rev, requested_revision=rev,
                       resolved_from='commit', repo_id=repo, repo_dir=rdir, problems=[], download=[],
                       download_bytes=None, path='%s/snapshots/%s' % (rdir, rev),
                       msg='no verified snapshot of %s@%s here' % (repo, rev))
    hub = ctx.fixtures['hub_files']
    total = sum(f['size'] for f in hub['files'])
    free = ctx.fixtures['host_facts']['disk']['hub_cache']['free_bytes']
    result = {
        'changed': False, 'revision': rev, 'requested_revision': rev, 'resolved_from': 'commit', 'repo_id': repo,
        'repo_dir': rdir, 'path': '%s/snapshots/%s' % (rdir, rev), 'files_total': len(hub['files']),
        'bytes_total': total, 'problems': [], 'repaired': [], 'hashed_files': 0, 'stale_incomplete': [],
        'download': [], 'download_bytes': 0,
        'space': {'free_bytes': free, 'needed_bytes': 0, 'needed_with_margin_bytes': 0,
                  'margin_pct': int(args.get('free_space_margin_pct') or 10), 'filesystem_path': args['cache_dir']},
        'complete': True, 'progress_file': '%s/.inkling/%s.progress.json' % (rdir, rev),
        'plan_file': '%s/.inkling/%s.plan.json' % (rdir, rev),
        'msg': '%s@%s (commit): complete, %d files verified' % (repo, rev[:12], len(hub['files'])),
    }
    result.update(pre)
    return 0, result


def image_pin_result(ctx, args):
    image_ref = module_utils('image_ref')
    record = {}
    entry = _file_entry(ctx, args.get('record_path') or '/var/lib/inkling/image/resolved.json')
    if entry:
        try:
            record = json.loads(entry['content'])
        except ValueError:
            record = {}
    try:
        plan = image_ref.plan_pin(args['reference'], digest=args.get('digest') or None, record=record,
                                  resolved_digest=args.get('resolved_digest') or None)
    except image_ref.ImageRefError as exc:
        return 1, {'failed': True, 'msg': 'image: %s' % exc, 'reference': args['reference']}
    present = bool(plan['pinned_reference']) and plan['pinned_reference'] in (ctx.state.get('images') or [])
    return 0, dict(plan, changed=False, present=present, recorded=record)


def _prune_images(ctx, args):
    kept = [{'id': hashlib.sha256(ref.encode()).hexdigest(), 'names': [ref.split('@')[0] + ':lab'],
             'reason': 'the target image' if args.get('target_digest') and ref.endswith(args['target_digest'])
             else 'rollback target'}
            for ref in ctx.state.get('images') or []]
    return 0, {'changed': False, 'removed': [], 'kept': kept}


def image_prune_result(ctx, args):
    """The prune (nothing to remove: the hosts hold the current and the previous image), and the auth file,
    the mirror drop-in and the record as the module writes them (module_utils/image_host.py gives the content),
    kept in the host's files."""
    image_host = module_utils('image_host')
    files = ctx.state.setdefault('files', {})
    dirs = ctx.state.setdefault('dirs', [])
    result = {'changed': False, 'removed': [], 'kept': []}

    def put(path, content, mode):
        changed = False
        parent = os.path.dirname(path)
        if parent not in dirs:
            dirs.append(parent)
            ctx.state.setdefault('dir_modes', {})[parent] = '0755'
            changed = True
        before = files.get(path)
        if before is None or before['content'] != content or before.get('mode') != mode:
            files[path] = {'content': content, 'mode': mode, 'mtime': round(time.time(), 6)}
            changed = True
        ctx.dirty = ctx.dirty or changed
        result['changed'] = result['changed'] or changed
        return {'path': path, 'changed': changed}

    if args.get('registry_auth'):
        result['auth_file'] = put(args['auth_file'], image_host.auth_content(args['registry_auth']), '0600')
    if args.get('mirror_dropin'):
        path = args['mirror_dropin']
        if args.get('mirror_content'):
            result['mirror_dropin'] = dict(put(path, args['mirror_content'], '0644'), state='file')
        else:
            changed = files.pop(path, None) is not None
            ctx.dirty = ctx.dirty or changed
            result['changed'] = result['changed'] or changed
            result['mirror_dropin'] = {'path': path, 'state': 'absent', 'changed': changed}
    if args.get('repositories'):
        dummy, pruned = _prune_images(ctx, args)
        result.update(removed=pruned['removed'], kept=pruned['kept'])
    if args.get('record'):
        result['record'] = put(args.get('record_path') or '/var/lib/inkling/image/resolved.json',
                               image_host.nice_json(args['record']), '0644')
    shown = invocation('image_prune', args)
    shown['module_args']['registry_auth'] = [dict(cred, password=NO_LOG) for cred in args.get('registry_auth') or []]
    result['invocation'] = shown
    return 0, result


def quadlet_unit_result(ctx, args):
    lint = module_utils('unit_lint')
    version = lint.parse_version('podman version %s' % ctx.fixtures['host_facts']['podman']['version'])
    spec = dict(name=args['name'], description=args.get('description') or 'Model server (vLLM) managed by inkling.fleet',
                image=args['image'], args=args['args'], env=args.get('env') or {},
                volumes=[dict({'options': ''}, **v) for v in args.get('volumes') or []],
                devices=args.get('devices') or [], podman_args=args.get('podman_args') or [],
                network=args.get('network') or 'host', label_disable=bool(args.get('label_disable')),
                secrets=[dict({'type': 'env', 'mode': '0400'}, **s) for s in args.get('secrets') or []],
                timeout_start_s=int(args['timeout_start_s']), timeout_stop_s=int(args['timeout_stop_s']),
                stop_timeout_s=int(args['stop_timeout_s']), restart_sec=int(args.get('restart_sec') or 30),
                start_limit_burst=int(args.get('start_limit_burst') or 3),
                start_limit_interval_s=int(args.get('start_limit_interval_s') or 7200),
                comments=args.get('comments') or [], podman_path=args.get('podman_path') or '/usr/bin/podman',
                quadlet_options=args.get('quadlet_options') or [])
    name = spec['name']
    result = {'changed': False, 'unit_name': name + '.service', 'backup': None, 'unit_type': 'quadlet', 'reloaded': False,
              'secret_args': ['--secret=%s' % lint.secret_arg(sec) for sec in spec['secrets']],
              'podman_version': lint.version_str(version)}
    content = lint.render_quadlet(spec, podman_version=version)
    result['content'] = content
    errors = lint.lint_unit(content, kind='quadlet', podman_version=version,
                            tensor_parallel_size=args.get('tensor_parallel_size'),
                            model_params_b=args.get('model_params_b'), min_timeout_start_s=args.get('min_timeout_start_s'),
                            shm_floor_bytes=args.get('shm_floor_bytes') or lint.DEFAULT_SHM_FLOOR_BYTES,
                            hub_cache_target=args.get('hub_cache_target'))
    # what quadlet generates from it: the service that runs the same container (podman run)
    result['generated'] = lint.render_systemd(spec)
    if errors:
        return 1, dict(result, failed=True, errors=errors,
                       msg='unit quadlet for %s not installed (the running unit is untouched): %s' % (name, '; '.join(errors)))
    path = '%s/%s.container' % ((args.get('quadlet_dir') or '/etc/containers/systemd').rstrip('/'), name)
    result['path'] = path
    before = _file_entry(ctx, path)
    if before is None or before['content'] != content:
        if before is not None:
            backup = {'content': before['content'], 'mode': '0600', 'mtime': round(time.time(), 6)}
            ctx.state['files'][args['backup_path']] = backup
            result['backup'] = args['backup_path']
        ctx.state['files'][path] = {'content': content, 'mode': '0644', 'mtime': round(time.time(), 6)}
        ctx.state['unit_path'] = path
        ctx.state['unit_generated'] = result['generated']
        ctx.dirty = True
        result['changed'] = True
        # daemon-reload (daemon_reload), then `systemctl cat` (check_loaded) finds the unit just written
        result['reloaded'] = bool(args.get('daemon_reload'))
    return 0, result


def service_host_result(ctx, args):
    """The image and the snapshot as the host holds them; when both are there, the cache set made as
    compile_cache (state present) makes it and the backup directory as file (state directory) does (in check
    mode, what would be made, whatever is missing)."""
    path = '%s/models--%s/snapshots/%s/config.json' % (
        args['hub_cache_dir'].rstrip('/'), args['repo_id'].replace('/', '--'), args['revision'])
    result = {'changed': False, 'created': [], 'fixed': [], 'prepared': False, 'snapshot_path': path,
              'image_present': args['image'] in (ctx.state.get('images') or []),
              'snapshot_present': _snapshot_link(ctx, path) is not None or _file_entry(ctx, path) is not None}
    check_mode = bool(args.get('_ansible_check_mode'))
    if not check_mode and not (result['image_present'] and result['snapshot_present']):
        return 0, result
    cache_dir, backup_dir = args['cache_dir'], args.get('backup_dir')
    if check_mode:
        created = [] if cache_dir in (ctx.state.get('cache_sets') or {}) else (
            [cache_dir] + ['%s/%s' % (cache_dir, s) for s in args.get('subdirs') or []])
        fixed = []
        if backup_dir and backup_dir not in (ctx.state.get('dirs') or []):
            created.append(backup_dir)
        elif backup_dir and entry_mode(ctx, backup_dir) != '0750':
            fixed.append(backup_dir)
    else:
        dummy, cache = compile_cache_result(ctx, {'state': 'present', 'cache_dir': cache_dir,
                                                  'subdirs': args.get('subdirs') or []})
        created, fixed = list(cache['created']), []
        if backup_dir:
            new = backup_dir not in (ctx.state.get('dirs') or [])
            dummy, made = file_result(ctx, {'path': backup_dir, 'state': 'directory', 'mode': '0750'})
            if made['changed']:
                (created if new else fixed).append(backup_dir)
    result.update(changed=bool(created or fixed), created=created, fixed=fixed, prepared=True)
    return 0, result


def podman_secret_result(ctx, args):
    name = args['name']
    secrets = ctx.state.setdefault('secrets', {})
    if args.get('state', 'present') == 'absent':
        changed = secrets.pop(name, None) is not None
        ctx.dirty = ctx.dirty or changed
        return 0, {'changed': changed}
    want = hashlib.sha256((args.get('data') or '').encode('utf-8')).hexdigest()
    if secrets.get(name) == want:
        return 0, {'changed': False}
    secrets[name] = want
    ctx.dirty = True
    return 0, {'changed': True, 'diff': {'before': '<secret>\n', 'after': '<different-secret>\n'}}


def compile_cache_result(ctx, args):
    state = args['state']
    sets = ctx.state.setdefault('cache_sets', {})
    if state == 'present':
        cache_dir = args['cache_dir']
        ctx.state.setdefault('service', {})['cache_dir'] = cache_dir
        created = []
        if cache_dir not in sets:
            sets[cache_dir] = {'key': None, 'files': []}
            created = [cache_dir] + ['%s/%s' % (cache_dir, s) for s in args.get('subdirs') or []]
        ctx.dirty = True
        return 0, {'changed': bool(created), 'created': created, 'fixed': [],
                   'reason': 'created %d, owner or mode set on 0 director(ies)' % len(created)}
    if state == 'pruned':
        present = [[c.split('/')[-2], c.split('/')[-1]] for c in sorted(sets)]
        keep = [list(k) for k in args.get('keep') or []]
        removed = [e for e in present if keep and e not in keep]
        for variant, digest in removed:
            sets.pop('%s/%s/%s' % (args['cache_root'].rstrip('/'), variant, digest), None)
            ctx.dirty = True
        kept = [e for e in present if e not in removed]
        return 0, {'changed': bool(removed), 'removed': removed, 'kept': kept,
                   'reason': 'removed %d set(s), kept %d' % (len(removed), len(kept)) if keep
                   else 'nothing removed: no set to keep was named'}
    cache_dir = args['cache_dir']
    entry = sets.get(cache_dir)
    if entry is None:
        return 1, {'failed': True, 'msg': 'compile_cache: the cache set %s does not exist. Remedy: run the '
                                          'inkling.fleet.service role first (it creates it).' % cache_dir}
    key = args['key']
    if state in ('claimed', 'seeded'):
        claim_changed = entry.get('key') != key.get('id')
        if claim_changed:
            was = 'empty' if not entry.get('files') else 'filled by this host before keys were kept'
            claim_reason = ('key written (the set was %s)' % was if entry.get('key') is None else
                            'the set carried another key; emptied: this host starts cold')
            if entry.get('key') is not None:
                entry['files'] = []
            entry['key'] = key.get('id')
            ctx.dirty = True
        else:
            claim_reason = 'the set carries this key'
        if state == 'claimed':
            return 0, {'changed': claim_changed, 'key_before': None, 'reason': claim_reason}
        manifest = args.get('manifest') or []
        if not args.get('source_url'):
            reason = 'not seeded (no source given): %s' % claim_reason
            return 0, {'changed': claim_changed, 'seeded': False, 'bytes': 0, 'seconds': 0.0, 'reason': reason}
        if entry.get('files'):
            return 0, {'changed': claim_changed, 'seeded': False, 'bytes': 0, 'seconds': 0.0,
                       'reason': 'not seeded: the set already holds caches of this key'}
        if not manifest:
            return 0, {'changed': claim_changed, 'seeded': False, 'bytes': 0, 'seconds': 0.0,
                       'reason': 'not seeded: the source has no files'}
        entry['files'] = manifest
        ctx.dirty = True
        total = sum(f['size'] for f in manifest)
        return 0, {'changed': True, 'seeded': True, 'bytes': total, 'seconds': 0.1,
                   'reason': 'seeded %d files (%d bytes) from %s in 0.1 s' % (len(manifest), total, args['source_url'])}
    if state in ('listed', 'served'):
        if entry.get('key') != key.get('id'):
            return 1, {'failed': True, 'msg': 'compile_cache: %s carries key %s, expected %s: it is not the set of '
                                              'this deployment.' % (cache_dir, entry.get('key'), key.get('id'))}
        files = entry.get('files') or []
        total = sum(f['size'] for f in files)
        if state == 'listed':
            return 0, {'changed': False, 'files': files, 'left_out': [], 'bytes': total,
                       'reason': '%d files, %d bytes' % (len(files), total)}
        host = args['address']
        url = 'http://%s:%d' % (host, int(args.get('port') or 8874))
        allow = sorted(set(address_of(n) for n in args.get('allow') or []))
        return 0, {'changed': True, 'files': files, 'left_out': [], 'bytes': total, 'url': url, 'allow': allow,
                   'reason': 'serving %d files (%d bytes) on %s for %d s to %d fleet address(es)'
                   % (len(files), total, url, int(args.get('serve_s') or 7200), len(allow))}
    raise Unsimulated('compile_cache state=%s' % state)


def page_cache_warm_result(ctx, args):
    wc = module_utils('warm_cache')
    total = sum(f['size'] for f in ctx.fixtures['hub_files']['files'])
    mem = ctx.fixtures['meminfo']
    decision = wc.warm_decision(mem['MemAvailable'], mem['MemTotal'], total, float(args.get('margin_pct') or 10),
                                float(args.get('min_margin_gib') or 4))
    result = {'changed': False, 'warmed': False, 'snapshot_bytes': total, 'bytes_warmed': 0, 'seconds': 0.0,
              'mem_available_bytes': mem['MemAvailable'], 'margin_bytes': decision['margin_bytes']}
    if not decision['warm']:
        result['reason'] = 'skipped: ' + decision['reason']
        return 0, result
    secs = max(0.01, total / 4.0e9)   # 4 GB/s of NVMe reads
    result.update(warmed=True, bytes_warmed=total, seconds=round(secs, 2),
                  reason='warmed %d bytes in %.1f s (%.2f GB/s): %s' % (total, secs, total / secs / 1e9, decision['reason']))
    return 0, result


def hf_prune_result(ctx, args):
    keep = [k for k in args.get('keep') or [] if re.match(r'^[0-9a-f]{40}$', str(k))]
    held = sorted(set(k.split('@')[1] for k in (ctx.state.get('snapshots') or {}) if k.startswith(args['repo_id'] + '@')))
    kept = [k for k in keep if k in held]
    msg = 'removed 0 revision(s) of %s, 0 blob(s), 0 B; kept %s' % (args['repo_id'], ', '.join(k[:12] for k in kept))
    return 0, {'changed': False, 'kept': kept, 'removed_revisions': [], 'removed_blobs': 0, 'freed_bytes': 0,
               'msg': msg}


def preflight_recheck_result(ctx, args):
    def compute():
        gh = module_utils('gpu_health')
        gpu = dict(ctx.fixtures['nvidia_gpu_info']['nvidia_gpu'])
        gpu.pop('nvlink', None)
        hf = ctx.fixtures['host_facts']
        facts = {'kernel_module_version': hf['kernel_module_version'], 'fabricmanager': hf['fabricmanager'],
                 'kernel_log': hf['kernel_log'], 'nvlink5': hf['nvlink5'], 'nvswitch_count': hf['nvswitch_count']}
        report = gh.recheck(args['host'], gpu, None, facts, int(args.get('tensor_parallel_size') or 8),
                            args.get('xid_ignore') or [], float(args.get('xid_since_s') or 0),
                            args.get('fabricmanager_unit') or 'nvidia-fabricmanager', None)
        report['gpu'] = gpu
        summary = gh.recheck_summary(report) if not report['ok'] else ''
        if args.get('fail') and not report['ok']:
            return 1, {'failed': True, 'msg': summary, 'report': report, 'summary': summary, 'elapsed_s': 0.41}
        return 0, {'changed': False, 'report': report, 'summary': summary, 'elapsed_s': 0.41}
    return cached(ctx, 'preflight_recheck', args, compute)


def image_trial_result(ctx, args):
    def compute():
        it = module_utils('image_trial')
        env = dict((k, str(v)) for k, v in (args.get('env') or {}).items())
        running_env = args.get('running_env')
        if running_env is not None:
            running_env = dict((k, str(v)) for k, v in running_env.items())
        if it.should_skip(args['image'], args['args'], args.get('running_image'), args.get('running_args'), env,
                          running_env):
            return 0, {'changed': False, 'skipped': True, 'failures': [],
                       'msg': 'image trial skipped on %s: the running unit already uses %s with these arguments'
                              % (args['host'], it.digest_of(args['image']))}
        answer = dict(ctx.fixtures['trial_answer'])
        verdict = it.judge(args['host'], args['image'], answer, args['compute_caps'], 0, '')
        result = {'changed': False, 'failures': verdict['failures'], 'elapsed_s': 21.4, 'entrypoint': ['vllm', 'serve']}
        keys = ('vllm_version', 'torch_version', 'cuda_version', 'arch_list', 'args_ok', 'args_error', 'parser')
        result.update(dict((k, answer.get(k)) for k in keys))
        result['arch_support'] = dict((cap, dict(zip(('kind', 'arch'), it.arch_support(cap, answer.get('arch_list')))))
                                      for cap in args['compute_caps'])
        if not verdict['ok']:
            return 1, dict(result, failed=True, msg=verdict['message'])
        return 0, dict(result, msg=verdict['message'])
    return cached(ctx, 'image_trial', args, compute)


def vllm_gate_result(ctx, args):
    """Gates pass at once: the unit is active and every probe answers 200 at the first polls."""
    gate = module_utils('gate')
    service = ctx.state.get('service') or {}
    restarts = int(service.get('n_restarts', 0))
    observer = gate.GateObserver(args['served_model_name'], int(args.get('timeout_s') or 3600),
                                 baseline_restarts=args.get('baseline_restarts'),
                                 completion=args.get('completion', True),
                                 latency_budget_s=float(args.get('latency_budget_s') or 30)).load_state(args.get('state'))
    elapsed = float(args.get('elapsed_offset_s') or 0)
    body = {'object': 'list', 'data': [{'id': args['served_model_name'], 'object': 'model', 'owned_by': 'vllm'}]}
    decision, last = gate.CONTINUE, ''
    for dummy in range(10):
        elapsed += 0.02
        want = observer.wants()
        obs = gate.Observation(round(elapsed, 2), active_state='active' if service.get('active') else 'inactive',
                               sub_state='running' if service.get('active') else 'dead', n_restarts=restarts,
                               health_status=200)
        if want['models']:
            obs.models_status, obs.models_body = 200, body
        if want['completion']:
            obs.completion_status, obs.completion_latency = 200, 0.05
        decision = observer.observe(obs)
        last = gate.describe(obs)
        if decision != gate.CONTINUE:
            break
    result = {'changed': False, 'ready': decision == gate.READY, 'elapsed_s': round(elapsed, 1),
              'phase': observer.phase, 'timings': observer.timings, 'n_restarts': restarts, 'cause': None,
              'decision': 'ready' if decision == gate.READY else 'failed', 'last': last}
    if decision != gate.READY:
        return 1, dict(result, failed=True, msg='%s: %s' % (args['unit'], observer.message), journal_tail=[])
    return 0, result


def vllm_analysis_result(ctx, args):
    """The golden set answered from the lab stand-in's answer table, judged by the collection's own rules; the
    load at the lab's measured figures (16 streams, TTFT 0.058 s, about 770 output tokens/s in all)."""
    def compute():
        analysis = module_utils('analysis')
        answers = ctx.fixtures['golden_answers']
        prompts = analysis.select(args['prompts'], args.get('modalities'))
        results = []
        for prompt in prompts:
            text = answers.get(' '.join(str(prompt.get('prompt', '')).split()))
            answer = ({'status': 200, 'content': text, 'finish_reason': 'stop', 'tokens': max(1, len(text.split()))}
                      if text is not None else {'status': 200, 'content': 'I do not know.', 'finish_reason': 'stop'})
            results.append(analysis.judge_prompt(prompt, answer))
        perf = None
        load = int(args.get('load_requests') or 0)
        if load > 0:
            max_tokens = int(args.get('load_max_tokens') or 128)
            wall = max_tokens * load / 770.0
            streams = [{'status': 200, 'ttft_s': 0.058, 'tokens': max_tokens, 'elapsed_s': wall} for dummy in range(load)]
            perf = analysis.load_summary(streams, wall, load, max_tokens)
        out = analysis.verdict(results, perf, args.get('baseline'), float(args.get('min_agreement', 0.8)),
                               float(args.get('max_regression', 0.2)), float(args.get('ttft_slack_s', 0.05)))
        out['elapsed_s'] = round(0.8 + (perf or {}).get('wall_s', 0), 2)
        out.setdefault('perf_old', None)
        if out['passed'] or not args.get('fail_on_problems', True):
            return 0, dict(out, changed=False)
        return 1, dict(out, changed=False, failed=True, msg=out['message'])
    return cached(ctx, 'vllm_analysis', args, compute)


RESPONDERS = {
    'stat': stat_result,
    'file': file_result,
    'copy': copy_result,
    'slurp': slurp_result,
    'command': command_result,
    'systemd_service': systemd_result,
    'systemd': systemd_result,
    'podman_secret': podman_secret_result,
    'nvidia_gpu_info': nvidia_gpu_info_result,
    'rollout_unit_state': rollout_unit_state_result,
    'unit_run': unit_run_result,
    'inkling_variant': lambda ctx, args: real_module(ctx, 'inkling_variant', args),
    'preflight_evaluate': lambda ctx, args: real_module(ctx, 'preflight_evaluate', args),
    'preflight_host_facts': host_facts_result,
    'preflight_recheck': preflight_recheck_result,
    'hf_snapshot': hf_snapshot_result,
    'hf_prune': hf_prune_result,
    'image_pin': image_pin_result,
    'image_prune': image_prune_result,
    'image_trial': image_trial_result,
    'quadlet_unit': quadlet_unit_result,
    'service_host': service_host_result,
    'compile_cache': compile_cache_result,
    'page_cache_warm': page_cache_warm_result,
    'vllm_gate': vllm_gate_result,
    'vllm_analysis': vllm_analysis_result,
}


# ---------------------------------------------------------------- shell commands of Ansible itself

def shell_command(cmd):
    """Ansible's own shell commands around a module (remote temporary directory, its permissions, its removal)."""
    match = re.search(r'(ansible-tmp-[0-9][\w.-]*)=', cmd)
    if 'mkdir' in cmd and match:
        base = match.group(1)
        found = re.search(r'echo (\S*/%s)\b' % re.escape(base), cmd)
        return 0, '%s=%s\n' % (base, found.group(1) if found else '/home/inkling-ops/.ansible/tmp/' + base), ''
    if re.search(r'\brm -f -r\b|\bchmod\b|\bsetfacl\b|\bchown\b', cmd):
        return 0, '', ''
    if re.search(r'echo ~', cmd):
        return 0, '/home/inkling-ops\n', ''
    raise Unsimulated('shell command %r' % cmd[:200])


def append_line(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode('utf-8'))
    finally:
        os.close(fd)


def exec_command(state_dir, host, cmd, in_data, puts):
    """Answer one exec_command of the connection: (rc, stdout bytes, stderr bytes, what it was)."""
    parsed = parse_payload(in_data)
    try:
        if parsed is None:
            rc, out, err = shell_command(cmd)
            return rc, out.encode(), err.encode(), 'shell'
        name, fqn, args = parsed
        ctx = Context(state_dir, host, puts)
        responder = RESPONDERS.get(name)
        if responder is None:
            raise Unsimulated('module %s' % fqn)
        rc, result = responder(ctx, args)
        ctx.save()
        result.setdefault('invocation', invocation(name, args))
        return rc, json.dumps(result).encode('utf-8'), b'', name
    except Exception as exc:  # pylint: disable=broad-except
        # anything the simulation cannot answer is the benchmark's problem: logged, and the task fails
        append_line(os.path.join(state_dir, 'problems.log'), '%s\t%s: %s\n' % (host, type(exc).__name__, exc))
        what = parsed[0] if parsed else 'shell'
        if parsed is None:
            return 127, b'', ('inkling_replay: not simulated: %s' % exc).encode(), what
        return 1, json.dumps({'failed': True, 'msg': 'bench simulation: not simulated: %s' % exc}).encode(), b'', what
