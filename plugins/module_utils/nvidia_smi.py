# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Run ``nvidia-smi`` and turn its machine-readable output into GPU facts.

Only machine-oriented invocations are used: ``--query-gpu`` in CSV, ``--version``,
``nvlink -s`` and ``topo -m``. The human table of plain ``nvidia-smi`` is never parsed.

Everything here is importable without Ansible running; the command runner is a
parameter so that tests can feed recorded output, and the default runner uses
``subprocess`` with ``LC_ALL=C`` and a timeout.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import csv
import os
import re
import subprocess

# (query field, key in the GPU dict, kind). Order is the order of the CSV columns asked for.
QUERY_FIELDS = (
    ('index', 'index', 'int'),
    ('uuid', 'uuid', 'str'),
    ('name', 'name', 'str'),
    ('pci.bus_id', 'pci_bus_id', 'str'),
    ('compute_cap', 'compute_cap', 'cap'),
    ('driver_version', 'driver_version', 'str'),
    ('memory.total', 'memory_total_mib', 'int'),
    ('persistence_mode', 'persistence_mode', 'bool'),
    ('mig.mode.current', 'mig_mode_current', 'bool'),
    ('mig.mode.pending', 'mig_mode_pending', 'bool'),
    ('ecc.mode.current', 'ecc_mode_current', 'bool'),
    ('ecc.errors.uncorrected.volatile.total', 'ecc_errors_uncorrected_volatile', 'int'),
    ('remapped_rows.correctable', 'remapped_rows_correctable', 'int'),
    ('remapped_rows.uncorrectable', 'remapped_rows_uncorrectable', 'int'),
    ('remapped_rows.pending', 'remapped_rows_pending', 'bool'),
    ('remapped_rows.failure', 'remapped_rows_failure', 'bool'),
    # What the driver says the GPU needs before it can be used again (None, Reset, Reboot, Drain P2P,
    # Drain and Reset; NVML's nvmlDeviceGpuRecoveryAction_t). Seen as "None" on the real H200 (580.159.04).
    ('gpu_recovery_action', 'gpu_recovery_action', 'str'),
    ('fabric.state', 'fabric_state', 'str'),
    ('fabric.status', 'fabric_status', 'str'),
)
QUERY_FIELD_NAMES = tuple(f[0] for f in QUERY_FIELDS)

# Without these the facts are useless: an older driver that lacks one of them is not worked around.
REQUIRED_FIELDS = ('index', 'uuid', 'name', 'pci.bus_id', 'driver_version', 'memory.total')

NULL_VALUES = frozenset(['n/a', '[n/a]', '[not supported]', 'not supported', ''])

TRUE_WORDS = frozenset(['enabled', 'yes', 'on', 'true', 'active'])
FALSE_WORDS = frozenset(['disabled', 'no', 'off', 'false', 'inactive'])

NVML_MISMATCH = 'Failed to initialize NVML: Driver/library version mismatch'
UNKNOWN_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')
ANSI_RE = re.compile(r'\x1b\[[0-9;]*m')

DEFAULT_TIMEOUT = 30


class NvidiaSmiError(Exception):
    """A failure with a kind the caller can branch on and a message an operator can act on."""

    def __init__(self, kind, message, cmd=None, rc=None, stdout=None, stderr=None, **extra):
        super(NvidiaSmiError, self).__init__(message)
        self.kind = kind
        self.message = message
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        # facts of the failure a caller reports (nvml_library_version on a mismatch)
        self.extra = extra

    def as_dict(self):
        result = dict(error_kind=self.kind, cmd=self.cmd, rc=self.rc,
                      stdout=self.stdout, stderr=self.stderr)
        result.update(self.extra)
        return result


def c_locale_env(base=None):
    """The environment for nvidia-smi: the caller's, with a fixed C locale (decimal points, English messages)."""
    env = dict(os.environ if base is None else base)
    env['LC_ALL'] = 'C'
    env['LANG'] = 'C'
    env.pop('LANGUAGE', None)
    return env


def subprocess_runner(argv, timeout):
    """Run argv with LC_ALL=C; return (rc, stdout, stderr). Raise NvidiaSmiError on timeout or exec failure."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=c_locale_env(), timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise NvidiaSmiError(
            'timeout',
            '%s did not answer within %ss. A hung nvidia-smi usually means the driver or a GPU is '
            'wedged (look for Xid errors in the kernel log: journalctl -k | grep -i xid); '
            'the host needs attention before it can serve.' % (' '.join(argv), timeout),
            cmd=argv)
    except OSError as exc:
        raise NvidiaSmiError('missing', 'cannot run %s: %s' % (argv[0], exc), cmd=argv)
    return (proc.returncode,
            proc.stdout.decode('utf-8', 'replace'),
            proc.stderr.decode('utf-8', 'replace'))


def null(value):
    """Strip a raw value; N/A, [N/A], [Not Supported] and empty become None."""
    if value is None:
        return None
    value = value.strip()
    if value.lower() in NULL_VALUES:
        return None
    return value


def to_bool(value):
    value = null(value)
    if value is None:
        return None
    low = value.lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError('not a yes/no value: %r' % value)


def to_int(value):
    value = null(value)
    if value is None:
        return None
    # tolerate units if a caller asked without nounits ("143771 MiB")
    return int(value.split()[0])


def split_cap(value):
    """'9.0' -> ('9.0', 9, 0); None -> (None, None, None)."""
    value = null(value)
    if value is None:
        return None, None, None
    match = re.match(r'^(\d+)\.(\d+)$', value)
    if not match:
        raise ValueError('not a compute capability: %r' % value)
    return value, int(match.group(1)), int(match.group(2))


def architecture_for(major, minor):
    """Architecture family from the compute capability (hopper, blackwell, ada, ampere, unknown)."""
    if major is None:
        return 'unknown'
    if major == 9:
        return 'hopper'
    if major in (10, 11, 12):
        return 'blackwell'
    if major == 8 and minor == 9:
        return 'ada'
    if major == 8:
        return 'ampere'
    return 'unknown'


def classify_failure(cmd, rc, stdout, stderr):
    """Raise NvidiaSmiError for the failure messages nvidia-smi prints; match the text, not the exit code."""
    text = '%s\n%s' % (stdout or '', stderr or '')
    if NVML_MISMATCH in text:
        lib = re.search(r'NVML library version:\s*(\S+)', text)
        raise NvidiaSmiError(
            'nvml_mismatch',
            '%s%s. The loaded nvidia kernel module and the user-space driver library (NVML) are different '
            'versions, usually because the driver packages were upgraded (for example by unattended-upgrades) '
            'while the old module stayed loaded. Remedy: reboot the host, or stop every GPU process and reload '
            'the nvidia kernel modules; then hold the driver packages (apt-mark hold / dnf versionlock) or '
            'exclude *nvidia* from unattended upgrades.'
            % (NVML_MISMATCH, ' (user-space NVML library %s)' % lib.group(1) if lib else ''),
            cmd=cmd, rc=rc, stdout=stdout, stderr=stderr, nvml_library_version=lib.group(1) if lib else None)
    if 'No devices were found' in text:
        raise NvidiaSmiError(
            'no_gpu',
            'nvidia-smi found no NVIDIA GPU ("No devices were found"). Check that the GPUs are present '
            '(lspci -d 10de:), not bound to vfio-pci, and that the nvidia kernel module is loaded.',
            cmd=cmd, rc=rc, stdout=stdout, stderr=stderr)
    if "couldn't communicate with the NVIDIA driver" in text or 'NVIDIA-SMI has failed' in text:
        raise NvidiaSmiError(
            'driver_not_loaded',
            'nvidia-smi could not talk to the NVIDIA driver: %s Load the nvidia kernel module '
            '(modprobe nvidia) or install the driver matching the running kernel.' % first_line(text),
            cmd=cmd, rc=rc, stdout=stdout, stderr=stderr)
    if 'Failed to initialize NVML' in text:
        raise NvidiaSmiError(
            'nvml_init', 'nvidia-smi: %s' % first_line(text),
            cmd=cmd, rc=rc, stdout=stdout, stderr=stderr)
    if rc != 0:
        raise NvidiaSmiError(
            'failed', '%s exited with %s: %s' % (' '.join(cmd), rc, first_line(text) or '(no output)'),
            cmd=cmd, rc=rc, stdout=stdout, stderr=stderr)


def first_line(text):
    for line in (text or '').splitlines():
        if line.strip():
            return line.strip()
    return ''


def query_gpus(nvidia_smi, runner=subprocess_runner, timeout=DEFAULT_TIMEOUT, fields=QUERY_FIELD_NAMES):
    """Run --query-gpu, dropping fields the driver does not know and retrying.

    Returns (rows, used_fields, unsupported_fields); rows are dicts of raw strings keyed by field.
    """
    fields = list(fields)
    unsupported = []
    while True:
        cmd = [nvidia_smi, '--query-gpu=%s' % ','.join(fields), '--format=csv,noheader,nounits']
        rc, out, err = runner(cmd, timeout)
        unknown = UNKNOWN_FIELD_RE.search('%s\n%s' % (out, err))
        if unknown:
            name = unknown.group(1)
            if name in REQUIRED_FIELDS or name not in fields:
                raise NvidiaSmiError(
                    'unsupported_driver',
                    'this driver does not know the query field "%s", which the GPU facts need; '
                    'upgrade the NVIDIA driver' % name, cmd=cmd, rc=rc, stdout=out, stderr=err)
            fields.remove(name)
            unsupported.append(name)
            continue
        classify_failure(cmd, rc, out, err)
        return parse_query_csv(out, fields, cmd=cmd), fields, unsupported


def parse_query_csv(text, fields, cmd=None):
    """Parse noheader CSV rows into dicts of raw strings; also accepts a header line and skips it."""
    rows = []
    lines = [ANSI_RE.sub('', line) for line in (text or '').splitlines() if line.strip()]
    for row in csv.reader(lines, skipinitialspace=True):
        if row and row[0].strip() == fields[0]:
            continue  # a header line
        if len(row) != len(fields):
            raise NvidiaSmiError(
                'parse', 'nvidia-smi --query-gpu answered %d columns for %d fields: %r'
                % (len(row), len(fields), ', '.join(row)), cmd=cmd, stdout=text)
        rows.append(dict(zip(fields, [cell.strip() for cell in row])))
    if not rows:
        raise NvidiaSmiError(
            'no_gpu', 'nvidia-smi --query-gpu listed no GPU. Check that the GPUs are present '
            '(lspci -d 10de:) and that the nvidia kernel module is loaded.', cmd=cmd, stdout=text)
    return rows


def normalise_gpu(raw):
    """One raw row (field -> str) to the GPU dict of the contract. Missing fields become None."""
    gpu = {}
    for field, key, kind in QUERY_FIELDS:
        value = raw.get(field)
        try:
            if kind == 'int':
                gpu[key] = to_int(value)
            elif kind == 'bool':
                gpu[key] = to_bool(value)
            elif kind == 'cap':
                gpu['compute_cap'], gpu['compute_cap_major'], gpu['compute_cap_minor'] = split_cap(value)
            else:
                gpu[key] = null(value)
        except ValueError as exc:
            raise NvidiaSmiError('parse', 'cannot read %s of GPU %s: %s' % (field, raw.get('index'), exc))
    return gpu


def parse_version(text):
    """`nvidia-smi --version` -> dict(driver_version, cuda_version, nvml_version); absent keys are None."""
    found = {'driver_version': None, 'cuda_version': None, 'nvml_version': None}
    keys = {'driver version': 'driver_version', 'cuda version': 'cuda_version', 'nvml version': 'nvml_version'}
    for line in (text or '').splitlines():
        if ':' not in line:
            continue
        label, value = line.split(':', 1)
        key = keys.get(label.strip().lower())
        if key:
            found[key] = null(value)
    return found


NVLINK_GPU_RE = re.compile(r'^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$')
NVLINK_LINK_RE = re.compile(r'^\s*Link (\d+): (.*)$')


def parse_nvlink_status(text):
    """`nvidia-smi nvlink -s` -> list of dict(index, uuid, links_active, links_inactive, link_speed_gbps)."""
    gpus = []
    current = None
    for line in (text or '').splitlines():
        line = ANSI_RE.sub('', line)
        head = NVLINK_GPU_RE.match(line)
        if head:
            current = {'index': int(head.group(1)), 'uuid': head.group(3), 'links_active': 0,
                       'links_inactive': 0, 'link_speed_gbps': None}
            gpus.append(current)
            continue
        link = NVLINK_LINK_RE.match(line)
        if link and current is not None:
            speed = re.match(r'^\s*([0-9.]+)\s*GB/s', link.group(2))
            if speed:
                current['links_active'] += 1
                value = float(speed.group(1))
                if current['link_speed_gbps'] is None or value < current['link_speed_gbps']:
                    current['link_speed_gbps'] = value
            else:
                current['links_inactive'] += 1
    return gpus


def parse_topo_matrix(text):
    """`nvidia-smi topo -m` -> {"GPU0": {"GPU1": "NV18", ...}, ...} (GPU-to-GPU entries only)."""
    lines = [ANSI_RE.sub('', line).rstrip() for line in (text or '').splitlines()]
    header = None
    matrix = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            if header is not None and matrix:
                break  # the legend follows an empty line
            continue
        if header is None:
            if tokens[0].startswith('GPU'):
                header = []
                for tok in tokens:
                    if tok in ('CPU', 'NUMA'):
                        break
                    header.append(tok)
            continue
        name = tokens[0]
        if not re.match(r'^GPU\d+$', name):
            continue
        row = {}
        for col, value in zip(header, tokens[1:1 + len(header)]):
            if col.startswith('GPU') and col != name:
                row[col] = value
        matrix[name] = row
    return matrix


def topo_summary(matrix):
    """(all GPU pairs on NVLink, min bonded NVLinks over GPU pairs or None)."""
    counts = []
    all_nv = True
    for row in matrix.values():
        for value in row.values():
            match = re.match(r'^NV(\d+)$', value)
            if match:
                counts.append(int(match.group(1)))
            else:
                all_nv = False
    if not counts:
        return (False if matrix and any(matrix.values()) else None), None
    return all_nv, (min(counts) if all_nv else None)


def count_nvswitches(lspci_text):
    """Count NVSwitch bridges in `lspci -d 10de:` output (named NVSwitch, or NVIDIA devices of the Bridge class)."""
    count = 0
    for line in (lspci_text or '').splitlines():
        if 'NVSwitch' in line or re.match(r'^\S+\s+Bridge', line):
            count += 1
    return count


def build_facts(gpus, version, unsupported, nvlink=None):
    """Assemble the nvidia_gpu dict (see docs/architecture.md)."""
    gpus = sorted(gpus, key=lambda g: (g['index'] is None, g['index']))
    drivers = sorted(set(g['driver_version'] for g in gpus if g.get('driver_version')))
    caps = sorted(set(g['compute_cap'] for g in gpus if g.get('compute_cap')),
                  key=lambda c: tuple(int(p) for p in c.split('.')))
    families = sorted(set(architecture_for(g['compute_cap_major'], g['compute_cap_minor']) for g in gpus))
    if len(families) == 1:
        architecture = families[0]
    else:
        architecture = 'mixed'
    memory = [g['memory_total_mib'] for g in gpus if g.get('memory_total_mib') is not None]
    facts = {
        'driver_version': drivers[0] if len(drivers) == 1 else (version or {}).get('driver_version'),
        'cuda_version': (version or {}).get('cuda_version'),
        'gpu_count': len(gpus),
        'architecture': architecture,
        'compute_caps': caps,
        'memory_total_mib': sum(memory),
        'gpus': [dict((k, v) for k, v in g.items() if k != 'driver_version') for g in gpus],
        'unsupported_fields': list(unsupported),
        'nvlink': nvlink if nvlink is not None else empty_nvlink(),
    }
    return facts


def empty_nvlink():
    return {'available': False, 'gpus': [], 'links_active_min': None, 'topology': {},
            'all_gpu_pairs_nvlink': None, 'nvlinks_between_gpus_min': None, 'nvswitch_count': None}


def collect(nvidia_smi, runner=subprocess_runner, timeout=DEFAULT_TIMEOUT, lspci=None, nvlink=True):
    """Gather the GPU facts. Returns (facts, warnings). Raises NvidiaSmiError on a host-level failure."""
    warnings = []
    rows, _fields, unsupported = query_gpus(nvidia_smi, runner=runner, timeout=timeout)
    gpus = [normalise_gpu(row) for row in rows]
    if unsupported:
        warnings.append('this driver does not know the query field(s) %s; they are null in the facts'
                        % ', '.join(unsupported))

    version = {}
    cmd = [nvidia_smi, '--version']
    rc, out, err = runner(cmd, timeout)
    if rc == 0:
        version = parse_version(out)
    if not version.get('cuda_version'):
        warnings.append('`nvidia-smi --version` gave no CUDA version (rc=%s); cuda_version is null' % rc)

    links = empty_nvlink()
    if nvlink:
        links = collect_nvlink(nvidia_smi, runner, timeout, lspci, warnings)
    return build_facts(gpus, version, unsupported, links), warnings


def collect_nvlink(nvidia_smi, runner, timeout, lspci, warnings):
    links = empty_nvlink()
    rc, out, err = runner([nvidia_smi, 'nvlink', '-s'], timeout)
    if rc == 0:
        per_gpu = parse_nvlink_status(out)
        links['available'] = True
        links['gpus'] = per_gpu
        if per_gpu:
            links['links_active_min'] = min(g['links_active'] for g in per_gpu)
    else:
        warnings.append('`nvidia-smi nvlink -s` failed (rc=%s): %s' % (rc, first_line(out + '\n' + err)))
    rc, out, err = runner([nvidia_smi, 'topo', '-m'], timeout)
    if rc == 0:
        links['topology'] = parse_topo_matrix(out)
        links['all_gpu_pairs_nvlink'], links['nvlinks_between_gpus_min'] = topo_summary(links['topology'])
    else:
        warnings.append('`nvidia-smi topo -m` failed (rc=%s): %s' % (rc, first_line(out + '\n' + err)))
    if lspci:
        rc, out, err = runner([lspci, '-d', '10de:'], timeout)
        if rc == 0:
            links['nvswitch_count'] = count_nvswitches(out)
        else:
            warnings.append('`lspci -d 10de:` failed (rc=%s); nvswitch_count is null' % rc)
    return links


def kernel_module_version(path='/proc/driver/nvidia/version'):
    """Version of the loaded nvidia kernel module, or None."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError):
        return None
    match = re.search(r'Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)', text)
    return match.group(1) if match else None


# The options of inkling.fleet.nvidia_gpu_info (its DOCUMENTATION describes them).
GPU_INFO_ARGUMENT_SPEC = dict(
    nvidia_smi_path=dict(type='str', default='nvidia-smi'),
    lspci_path=dict(type='str', default='lspci'),
    timeout=dict(type='int', default=30),
    nvlink=dict(type='bool', default=True),
)
