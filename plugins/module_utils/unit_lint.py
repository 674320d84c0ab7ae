# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Render and lint the systemd unit that serves the model.

Pure functions, unit-tested without Ansible or podman running:

* :func:`render_quadlet` / :func:`render_systemd` turn a *spec* (a plain dict the
  service role builds from the variant) into a quadlet ``.container`` file or a
  plain ``.service`` unit running ``podman run``.
* :func:`lint_unit` checks a rendered unit (ours or anybody's) for the field
  failures the collection must catch (docs/field-failures.md): F8 (/dev/shm at TP>1), F9 (read-only hub
  cache without ``HF_HUB_OFFLINE=1``), F12 (image not pinned by digest), F13
  (quadlet keys the installed podman does not know), F14 (start timeout vs health
  start period, pull at start) and F15 (``VLLM_ENGINE_READY_TIMEOUT_S``).
* :func:`parse_quadlet_dryrun` and :func:`parse_systemd_verify` read the output
  of ``quadlet -dryrun`` and ``systemd-analyze verify``.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
import shlex

# Minimum podman version that knows each quadlet [Container] key we may write.
# Sources: podman-systemd.unit(5) of each release, podman PR #18788 (Pull=, June 2023,
# first released in 4.6), quadlet itself appeared in 4.4.
QUADLET_KEY_MIN_VERSION = {
    'Container': {
        'AddDevice': (4, 4), 'ContainerName': (4, 4), 'Environment': (4, 4), 'Exec': (4, 4),
        'Image': (4, 4), 'Label': (4, 4), 'Network': (4, 4), 'PodmanArgs': (4, 4),
        'SecurityLabelDisable': (4, 4), 'Volume': (4, 4), 'PublishPort': (4, 4),
        'Notify': (4, 4), 'User': (4, 4), 'Group': (4, 4),
        'Secret': (4, 5), 'HealthCmd': (4, 5), 'HealthInterval': (4, 5), 'HealthRetries': (4, 5),
        'HealthStartPeriod': (4, 5), 'HealthTimeout': (4, 5), 'HealthOnFailure': (4, 5),
        'Pull': (4, 6), 'ShmSize': (5, 0), 'StopTimeout': (5, 0), 'StopSignal': (4, 7),
    },
}
QUADLET_MIN_VERSION = (4, 4)
SYSTEMD_DEFAULT_TIMEOUT_START_S = 90
VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S = 600
# NCCL needs far more than podman's 64 MB default /dev/shm at TP>1 (F8).
DEFAULT_SHM_FLOOR_BYTES = 16 * 1024 ** 3
# Models from this size on need VLLM_ENGINE_READY_TIMEOUT_S raised above vLLM's 600 s (F15).
LARGE_MODEL_PARAMS_B = 100

_SIZE_UNITS = {'': 1, 'b': 1, 'k': 1024, 'm': 1024 ** 2, 'g': 1024 ** 3, 't': 1024 ** 4}
_TIME_UNITS = {'': 1, 's': 1, 'sec': 1, 'm': 60, 'min': 60, 'h': 3600, 'hr': 3600, 'ms': 0.001, 'us': 0.000001}
_DIGEST_RE = re.compile(r'^[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[^@\s]+@sha256:[0-9a-f]{64}$')


class UnitLintError(Exception):
    """A unit that must not be installed; ``errors`` holds one message per problem."""

    def __init__(self, errors):
        self.errors = list(errors)
        super(UnitLintError, self).__init__('; '.join(self.errors))


# ---------------------------------------------------------------------------
# small parsers
# ---------------------------------------------------------------------------

def parse_version(text):
    """``podman version 5.4.2`` / ``5.4.2-dev`` -> (5, 4, 2); None when no version is found."""
    m = re.search(r'(\d+)\.(\d+)(?:\.(\d+))?', text or '')
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def version_str(version):
    return '.'.join(str(x) for x in version) if version else 'unknown'


def parse_size(text):
    """Podman size (``16g``, ``64m``, ``1073741824``) -> bytes; None when unparsable."""
    m = re.match(r'^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*$', str(text).lower())
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_timespan(text):
    """systemd time span (``7200``, ``2h``, ``60m``, ``1h 30min``, ``infinity``) -> seconds (float('inf'))."""
    text = str(text).strip().lower()
    if text == 'infinity':
        return float('inf')
    total = 0.0
    parts = re.findall(r'(\d+(?:\.\d+)?)\s*([a-z]*)', text)
    if not parts or re.sub(r'[\d.\sa-z]', '', text):
        return None
    for num, unit in parts:
        if unit not in _TIME_UNITS:
            return None
        total += float(num) * _TIME_UNITS[unit]
    return total


def parse_unit(content):
    """INI-like unit text -> {section: [(key, value), ...]} keeping repeated keys and order.

    Continuation lines (trailing backslash) are joined, comments dropped.
    """
    sections = {}
    current = None
    pending = ''
    for raw in content.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ''
        if line.endswith('\\'):
            pending = line[:-1].rstrip() + ' '
            continue
        if not line or line[0] in '#;':
            continue
        if line.startswith('[') and line.endswith(']'):
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        if '=' in line and current is not None:
            key, value = line.split('=', 1)
            sections[current].append((key.strip(), value.strip()))
    return sections


def _values(sections, section, key):
    return [v for k, v in sections.get(section, []) if k == key]


def _last(sections, section, key, default=None):
    vals = _values(sections, section, key)
    return vals[-1] if vals else default


def _split_env(value):
    """``Environment=A=1 "B=two words"`` -> {'A': '1', 'B': 'two words'}."""
    env = {}
    for item in shlex.split(value):
        if '=' in item:
            k, v = item.split('=', 1)
            env[k] = v
    return env


def _arg_value(args, i, names):
    """The value ``args[i]`` gives one of ``names`` (``--flag value`` or ``--flag=value``), or None."""
    value = None
    for name in names:
        if args[i] == name and i + 1 < len(args):
            value = args[i + 1]
        elif args[i].startswith(name + '='):
            value = args[i].split('=', 1)[1]
    return value


def _flag_value(args, names):
    """Value of the last ``--flag value`` / ``--flag=value`` in a list of args, or None."""
    found = None
    for i in range(len(args)):
        value = _arg_value(args, i, names)
        if value is not None:
            found = value
    return found


# ---------------------------------------------------------------------------
# what a unit says, whatever its flavour
# ---------------------------------------------------------------------------

def describe_unit(content, kind):
    """Pull the facts the lint needs out of a quadlet or plain unit.

    Returns a dict: image, vllm_args, podman_args, env, volumes [(src, dst, opts)],
    timeout_start (seconds or None), health_start_period (seconds or None), pull.
    """
    s = parse_unit(content)
    facts = {'image': None, 'vllm_args': [], 'podman_args': [], 'env': {}, 'volumes': [],
             'timeout_start': None, 'health_start_period': None, 'pull': None, 'shm_size': None}
    ts = _last(s, 'Service', 'TimeoutStartSec')
    facts['timeout_start'] = parse_timespan(ts) if ts is not None else None
    if kind == 'quadlet':
        facts['image'] = _last(s, 'Container', 'Image')
        for v in _values(s, 'Container', 'Exec'):
            facts['vllm_args'].extend(shlex.split(v))
        for v in _values(s, 'Container', 'PodmanArgs'):
            facts['podman_args'].extend(shlex.split(v))
        for v in _values(s, 'Container', 'Environment'):
            facts['env'].update(_split_env(v))
        for v in _values(s, 'Container', 'Volume'):
            parts = v.split(':')
            facts['volumes'].append((parts[0], parts[1] if len(parts) > 1 else parts[0],
                                     parts[2] if len(parts) > 2 else ''))
        hsp = _last(s, 'Container', 'HealthStartPeriod')
        facts['health_start_period'] = parse_timespan(hsp) if hsp is not None else None
        facts['pull'] = _last(s, 'Container', 'Pull')
        facts['shm_size'] = _last(s, 'Container', 'ShmSize')
        if _last(s, 'Container', 'Network') == 'host':
            facts['podman_args'].append('--network=host')
    else:
        start = _last(s, 'Service', 'ExecStart') or ''
        argv = shlex.split(start.lstrip('-@+!:'))
        podman_args, image, rest = _split_podman_run(argv)
        facts['image'] = image
        facts['vllm_args'] = rest
        facts['podman_args'] = podman_args
        i = 0
        while i < len(podman_args):
            val = _arg_value(podman_args, i, ('-e', '--env'))
            if val is not None and '=' in val:
                k, v = val.split('=', 1)
                facts['env'][k] = v
            vol = _arg_value(podman_args, i, ('-v', '--volume'))
            if vol is not None:
                parts = vol.split(':')
                facts['volumes'].append((parts[0], parts[1] if len(parts) > 1 else parts[0],
                                         parts[2] if len(parts) > 2 else ''))
            i += 1
        facts['pull'] = _flag_value(podman_args, ['--pull'])
    if facts['pull'] is None:
        facts['pull'] = _flag_value(facts['podman_args'], ['--pull'])
    if facts['shm_size'] is None:
        facts['shm_size'] = _flag_value(facts['podman_args'], ['--shm-size'])
    return facts


_PODMAN_RUN_VALUE_FLAGS = {
    '--name', '--cidfile', '--cgroups', '--pull', '--sdnotify', '--ipc', '--network', '--net', '--device',
    '--security-opt', '-e', '--env', '-v', '--volume', '--secret', '--stop-timeout', '--shm-size',
    '--label', '-l', '--log-driver', '--health-cmd', '--health-interval', '--health-start-period',
    '--health-retries', '--health-timeout', '--user', '-u', '--workdir', '-w', '--entrypoint',
    '--authfile', '-p', '--publish', '--ulimit', '--tmpfs', '--env-file', '--stop-signal', '--mount',
    '--conmon-pidfile', '--pidfile', '--cpus', '--memory', '-m', '--hostname', '-h', '--pod',
}


def _split_podman_run(argv):
    """``podman run [opts] IMAGE [args]`` -> (opts, image, args)."""
    try:
        i = argv.index('run') + 1
    except ValueError:
        return [], None, []
    opts = []
    while i < len(argv):
        a = argv[i]
        if a == '--':
            i += 1
            break
        if a.startswith('-'):
            opts.append(a)
            if '=' not in a and a in _PODMAN_RUN_VALUE_FLAGS and i + 1 < len(argv):
                opts.append(argv[i + 1])
                i += 1
            i += 1
            continue
        break
    image = argv[i] if i < len(argv) else None
    return opts, image, argv[i + 1:]


# ---------------------------------------------------------------------------
# the lint
# ---------------------------------------------------------------------------

def lint_unit(content, kind='quadlet', podman_version=None, tensor_parallel_size=None,
              model_params_b=None, min_timeout_start_s=None, shm_floor_bytes=DEFAULT_SHM_FLOOR_BYTES,
              hub_cache_target=None, require_digest=True):
    """Return a list of error strings for a rendered unit ([] when it may be installed).

    ``kind`` is ``quadlet`` (a ``.container`` file) or ``systemd`` (a plain ``.service``
    running ``podman run``). ``podman_version`` is a tuple; when given, quadlet keys the
    version does not know are errors (F13). ``tensor_parallel_size`` and
    ``model_params_b`` fall back to what the unit's vLLM args say.
    """
    errors = []
    sections = parse_unit(content)
    f = describe_unit(content, kind)
    where = 'unit'

    # F13: the installed podman must know every quadlet key we use.
    if kind == 'quadlet':
        if podman_version is not None and podman_version[:2] < QUADLET_MIN_VERSION:
            errors.append('podman %s has no quadlet (needs >= %s); render a plain systemd unit instead'
                          % (version_str(podman_version), version_str(QUADLET_MIN_VERSION)))
        elif podman_version is not None:
            for section, known in QUADLET_KEY_MIN_VERSION.items():
                for key, _value in sections.get(section, []):
                    need = known.get(key)
                    if need and podman_version[:2] < need:
                        errors.append("quadlet on podman %s does not know key '%s' in [%s] (needs >= %s); "
                                      "the unit would not be generated"
                                      % (version_str(podman_version), key, section, version_str(need)))
        if 'Container' not in sections:
            errors.append('quadlet file has no [Container] section')

    # F12: image fully qualified and pinned by digest.
    image = f['image']
    if not image:
        errors.append('%s names no image' % where)
    elif require_digest and not _DIGEST_RE.match(image):
        errors.append('image %r is not pinned by digest: expected registry/name@sha256:<64 hex>' % image)

    # F14: never pull at start (the image role pulls beforehand).
    if f['pull'] not in ('never',):
        errors.append('image is pulled at start (pull=%s): set Pull=never (podman >= 4.6) or --pull=never; '
                      'the image role pulls it beforehand' % (f['pull'] or 'missing (default)'))

    # F8: /dev/shm at TP > 1.
    tp = tensor_parallel_size
    if tp is None:
        val = _flag_value(f['vllm_args'], ['--tensor-parallel-size', '-tp'])
        tp = int(val) if val and val.isdigit() else 1
    if tp > 1:
        ipc = _flag_value(f['podman_args'], ['--ipc'])
        shm = parse_size(f['shm_size']) if f['shm_size'] else None
        if ipc != 'host' and (shm is None or shm < shm_floor_bytes):
            errors.append('tensor_parallel_size=%d but container /dev/shm left at %s; add --ipc=host '
                          '(PodmanArgs=--ipc=host) or shm size >= %dg (NCCL shared-memory segments, F8)'
                          % (tp, f['shm_size'] or 'default (64m)', shm_floor_bytes // 1024 ** 3))

    # F9: a read-only hub cache needs offline mode and HF_HUB_CACHE pointing at it.
    env = f['env']
    for src, dst, opts in f['volumes']:
        is_hub = (hub_cache_target and dst == hub_cache_target) or dst == env.get('HF_HUB_CACHE') \
            or re.search(r'huggingface(/hub)?/?$', dst) or re.search(r'huggingface(/hub)?/?$', src)
        if not is_hub:
            continue
        if 'ro' in opts.split(','):
            if env.get('HF_HUB_OFFLINE') not in ('1', 'true', 'True', 'YES', 'yes', 'ON', 'on'):
                errors.append('read-only hub cache %s requires HF_HUB_OFFLINE=1 (else huggingface_hub writes '
                              'into it: [Errno 30] Read-only file system, F9)' % dst)
            if env.get('HF_HUB_CACHE') != dst:
                errors.append('HF_HUB_CACHE=%s does not point at the read-only hub cache mount %s'
                              % (env.get('HF_HUB_CACHE'), dst))

    # F15: vLLM's engine-ready timeout for big models; F14: systemd's start timeout above it.
    ert_raw = env.get('VLLM_ENGINE_READY_TIMEOUT_S')
    ert = float(ert_raw) if ert_raw and re.match(r'^\d+(\.\d+)?$', ert_raw) else None
    if ert_raw is not None and ert is None:
        errors.append('VLLM_ENGINE_READY_TIMEOUT_S=%r is not a number of seconds' % ert_raw)
    if model_params_b is not None and model_params_b >= LARGE_MODEL_PARAMS_B:
        if ert is None:
            errors.append('VLLM_ENGINE_READY_TIMEOUT_S unset for a %gB model; vLLM will abort at %d s '
                          '(TimeoutError: Timed out waiting for engines, F15)'
                          % (model_params_b, VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S))
        elif ert <= VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S:
            errors.append('VLLM_ENGINE_READY_TIMEOUT_S=%g is not above vLLM\'s %d s default for a %gB model (F15)'
                          % (ert, VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S, model_params_b))
    ts = f['timeout_start']
    effective_ts = ts if ts is not None else SYSTEMD_DEFAULT_TIMEOUT_START_S
    if ts is not None and ts == 0:
        effective_ts = float('inf')  # TimeoutStartSec=0 disables the timeout
    ts_text = 'unset (90 s default)' if ts is None else '{0:g} s'.format(ts)
    if min_timeout_start_s is not None and effective_ts < min_timeout_start_s:
        errors.append('TimeoutStartSec {0} is below the required {1:d} s (F14)'.format(ts_text, int(min_timeout_start_s)))
    if ert is not None and effective_ts < ert:
        errors.append('TimeoutStartSec {0} is below VLLM_ENGINE_READY_TIMEOUT_S={1:g}: systemd would kill the '
                      'start before vLLM gives up (F14/F15)'.format(ts_text, ert))
    hsp = f['health_start_period']
    if hsp is not None and hsp >= effective_ts:
        errors.append('HealthStartPeriod {0:g} s exceeds effective TimeoutStartSec ({1}) (F14)'.format(
            hsp, '90s default' if ts is None else '{0:g} s'.format(ts)))
    return errors


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------

def _q(value, specifiers=False):
    """Quote one word for a systemd/quadlet command line.

    ``%`` is doubled (systemd specifiers) unless ``specifiers`` is true (our own
    ``%t``/``%N``). JSON values are wrapped in single quotes to avoid escapes.
    """
    value = str(value)
    if not specifiers:
        value = value.replace('%', '%%')
    if value and re.match(r'^[A-Za-z0-9_@%+=:,./-]+$', value):
        return value
    if "'" not in value and '\\' not in value:
        return "'" + value + "'"
    return '"' + value.replace('\\', '\\\\').replace('"', '\\"') + '"'


def _env_item(key, value):
    return _q('%s=%s' % (key, value))


def _header(spec):
    lines = ['# Managed by Ansible (inkling.fleet.service): edits are overwritten.']
    for note in spec.get('comments', []):
        lines.append('# ' + note)
    return lines


def _unit_section(spec):
    lines = ['[Unit]', 'Description=%s' % spec['description'],
             'Wants=network-online.target', 'After=network-online.target']
    if spec.get('start_limit_burst'):
        lines.append('StartLimitIntervalSec=%d' % spec['start_limit_interval_s'])
        lines.append('StartLimitBurst=%d' % spec['start_limit_burst'])
    return lines


def _service_section(spec, extra=None):
    lines = ['[Service]']
    lines.extend(extra or [])
    lines += ['Restart=on-failure', 'RestartSec=%d' % spec.get('restart_sec', 30),
              'TimeoutStartSec=%d' % spec['timeout_start_s'], 'TimeoutStopSec=%d' % spec['timeout_stop_s']]
    return lines


def _install_section(spec):
    return ['[Install]', 'WantedBy=%s' % spec.get('wanted_by', 'multi-user.target')]


# How each container setting of a spec is written: as a quadlet [Container] key, or as a `podman run` argument.
QUADLET_FORMS = {'network': 'Network=%s', 'device': 'AddDevice=%s', 'label_disable': 'SecurityLabelDisable=true',
                 'volume': lambda vol: 'Volume=%s' % _volume(vol).replace('%', '%%'),
                 'env': lambda key, value: 'Environment=%s' % _env_item(key, value)}
RUN_FORMS = {'network': '--network=%s', 'device': '--device=%s', 'label_disable': '--security-opt=label=disable',
             'volume': lambda vol: '--volume=%s' % _volume(vol),
             'env': lambda key, value: '--env=%s=%s' % (key, value)}


def _container_settings(spec, forms):
    """The spec's network, devices, SELinux label, volumes and environment, in this order, each written in
    ``forms`` (QUADLET_FORMS or RUN_FORMS)."""
    items = []
    if spec.get('network'):
        items.append(forms['network'] % spec['network'])
    items.extend(forms['device'] % dev for dev in spec.get('devices', []))
    if spec.get('label_disable'):
        items.append(forms['label_disable'])
    items.extend(forms['volume'](vol) for vol in spec.get('volumes', []))
    items.extend(forms['env'](key, spec['env'][key]) for key in sorted(spec.get('env', {})))
    return items


def render_quadlet(spec, podman_version=None):
    """Render a quadlet ``.container`` file from a spec (see :func:`validate_spec`)."""
    validate_spec(spec)
    pull_key = podman_version is None or podman_version[:2] >= QUADLET_KEY_MIN_VERSION['Container']['Pull']
    secret_key = podman_version is None or podman_version[:2] >= QUADLET_KEY_MIN_VERSION['Container']['Secret']
    lines = _header(spec) + _unit_section(spec) + ['', '[Container]']
    lines.append('ContainerName=%s' % spec['name'])
    lines.append('Image=%s' % spec['image'])
    if pull_key:
        lines.append('Pull=never')
    lines += _container_settings(spec, QUADLET_FORMS)
    podman_args = list(spec.get('podman_args', []))
    if not pull_key:
        podman_args.append('--pull=never')
    for sec in spec.get('secrets', []):
        if secret_key:
            lines.append('Secret=%s' % secret_arg(sec))
        else:
            podman_args.append('--secret=%s' % secret_arg(sec))
    podman_args.append('--stop-timeout=%d' % spec['stop_timeout_s'])
    for arg in podman_args:
        lines.append('PodmanArgs=%s' % _q(arg))
    lines.append('Exec=%s' % ' '.join(_q(a) for a in spec['args']))
    lines.extend(spec.get('quadlet_options') or [])
    lines.append('')
    lines += _service_section(spec)
    lines.append('')
    lines += _install_section(spec)
    return '\n'.join(lines) + '\n'


def render_systemd(spec):
    """Render a plain ``.service`` unit running ``podman run`` (podman < 4.4, no quadlet)."""
    validate_spec(spec)
    if spec.get('quadlet_options'):
        raise UnitLintError(['quadlet_options %s cannot be used in a plain systemd unit (no quadlet on this host)'
                             % ', '.join(spec['quadlet_options'])])
    podman = spec.get('podman_path', '/usr/bin/podman')
    fixed = [podman, 'run', '--name', spec['name'], '--cidfile=%t/%N.cid', '--replace', '--rm',
             '--cgroups=split', '--sdnotify=conmon', '-d', '--pull=never']
    run = _container_settings(spec, RUN_FORMS)
    for sec in spec.get('secrets', []):
        run.append('--secret=%s' % secret_arg(sec))
    run.append('--stop-timeout=%d' % spec['stop_timeout_s'])
    run.extend(spec.get('podman_args', []))
    run.append(spec['image'])
    run.extend(spec['args'])
    cid = '%t/%N.cid'
    extra = ['Environment=PODMAN_SYSTEMD_UNIT=%n', 'Type=notify', 'NotifyAccess=all', 'KillMode=mixed',
             'Delegate=yes', 'SyslogIdentifier=%N',
             'ExecStartPre=-%s rm -v -f -i --cidfile=%s' % (podman, cid),
             'ExecStart=%s' % ' '.join([_q(a, specifiers=True) for a in fixed] + [_q(a) for a in run]),
             'ExecStop=%s rm -v -f -i --cidfile=%s' % (podman, cid),
             'ExecStopPost=-%s rm -v -f -i --cidfile=%s' % (podman, cid)]
    lines = _header(spec) + _unit_section(spec) + [''] + _service_section(spec, extra) + [''] + _install_section(spec)
    return '\n'.join(lines) + '\n'


def _volume(vol):
    text = '%s:%s' % (vol['source'], vol['target'])
    if vol.get('options'):
        text += ':' + vol['options']
    return text


def secret_arg(sec):
    """podman's --secret value: an environment variable (type=env, target its name) or a file in the
    container (type=mount, target its path, with the file's mode), never the secret's data."""
    if sec.get('type', 'env') == 'mount':
        return '%s,type=mount,target=%s,mode=%s' % (sec['name'], sec['target'], sec.get('mode') or '0400')
    return '%s,type=env,target=%s' % (sec['name'], sec['target'])


REQUIRED_SPEC_KEYS = ('name', 'description', 'image', 'args', 'timeout_start_s', 'timeout_stop_s', 'stop_timeout_s')


def validate_spec(spec):
    missing = [k for k in REQUIRED_SPEC_KEYS if spec.get(k) in (None, '')]
    if missing:
        raise UnitLintError(['unit spec lacks %s' % ', '.join(missing)])
    if not re.match(r'^[A-Za-z0-9][A-Za-z0-9_.@-]*$', spec['name']):
        raise UnitLintError(['unit name %r is not a valid systemd unit name' % spec['name']])
    for key, value in spec.get('env', {}).items():
        if not re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', key):
            raise UnitLintError(['environment variable name %r is invalid' % key])
        if '\n' in str(value):
            raise UnitLintError(['environment variable %s contains a newline' % key])
    for sec in spec.get('secrets', []):
        kind = sec.get('type', 'env')
        name_ok = re.match(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$', str(sec.get('name', '')))
        if kind == 'env':
            target_ok = re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', str(sec.get('target', '')))
        elif kind == 'mount':
            target_ok = re.match(r'^/[A-Za-z0-9_./-]+$', str(sec.get('target', ''))) and '..' not in sec['target']
            target_ok = target_ok and re.match(r'^0?[0-7]{3}$', str(sec.get('mode') or '0400'))
        else:
            target_ok = False
        if not (name_ok and target_ok):
            raise UnitLintError(['secret %r: expected a podman secret name and, for type env, a variable name, '
                                 'for type mount, an absolute path (and an octal mode)' % (sec,)])
    for line in spec.get('quadlet_options') or []:
        if not re.match(r'^[A-Za-z][A-Za-z0-9]*=[^\n]*$', line):
            raise UnitLintError(['quadlet option %r is not a single Key=value line' % line])
    for arg in list(spec['args']) + list(spec.get('podman_args', [])):
        if '\n' in str(arg):
            raise UnitLintError(['argument %r contains a newline' % arg])


# ---------------------------------------------------------------------------
# tool output
# ---------------------------------------------------------------------------

_DRYRUN_BAD = re.compile(r"(unsupported key|unsupported value|ignoring|error|invalid|unknown key|not supported|"
                         r"converting)", re.I)


def parse_quadlet_dryrun(rc, stdout, stderr, filename):
    """Read ``quadlet -dryrun`` output for ``filename`` (e.g. ``inkling-vllm.container``).

    Returns ``(generated_service_text or None, [error lines])``. Quadlet skips a whole
    file with an unknown key and only logs it (F13): any "unsupported key", "converting
    ... :" or "Error converting ..., ignoring" line is an error, and a missing
    ``---NAME.service---`` block too.
    """
    errors = []
    for line in (stderr or '').splitlines():
        text = line.strip()
        if not text or 'Loading source unit file' in text:
            continue
        if _DRYRUN_BAD.search(text):
            errors.append(re.sub(r'^quadlet-generator\[\d+\]:\s*', '', text))
    service = filename.rsplit('.', 1)[0] + '.service'
    generated = None
    blocks = re.split(r'^---([^\n]+)---$', stdout or '', flags=re.M)
    for i in range(1, len(blocks) - 1, 2):
        if blocks[i].strip() == service:
            generated = blocks[i + 1].lstrip('\n')
    if generated is None:
        errors.append('quadlet generated no %s from %s (rc=%s)' % (service, filename, rc))
    elif rc not in (0, None) and not errors:
        errors.append('quadlet -dryrun exited %s' % rc)
    return generated, errors


_VERIFY_IGNORE = (
    # systemd-analyze verify looks at the whole boot transaction; these concern other units.
    re.compile(r'Failed to load .*/dev-', re.I),
)


def parse_systemd_verify(rc, stdout, stderr, unit_path):
    """Problems ``systemd-analyze verify`` reports about ``unit_path`` (list of str).

    ``verify`` exits 0 even for "Unknown key ... ignoring", so every line that names
    the unit file (or the unit) counts; lines about other units are left out.
    """
    errors = []
    unit_file = unit_path.rsplit('/', 1)[-1]
    for line in ((stdout or '') + '\n' + (stderr or '')).splitlines():
        text = line.strip()
        if not text or any(p.search(text) for p in _VERIFY_IGNORE):
            continue
        if unit_path in text or text.startswith(unit_file) or (unit_file + ':') in text:
            errors.append(text)
    if rc not in (0, None) and not errors:
        errors.append('systemd-analyze verify %s exited %s: %s' % (unit_path, rc, (stderr or stdout or '').strip()[-400:]))
    return errors
