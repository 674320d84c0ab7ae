# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""GPU health beyond nvidia-smi's counters, as pure functions over gathered facts.

- Xid events in the kernel log since boot that mean a bad GPU (``gpu.xid``), each named with
  the GPU index and its PCI bus id;
- the driver's recovery action for each GPU (``gpu.recovery_action``, ``gpu_recovery_action``
  of ``nvidia-smi --query-gpu``);
- what an NVLink5 HGX board (B200/B300) needs besides the fabric manager: the InfiniBand
  management stack (``ib_umad``) and the NVLink Subnet Manager (``fabric.nvlink5``);
- the fast re-check run right before a host is drained (:func:`recheck`), which reuses the
  preflight checks of the driver, the GPUs and the fabric and adds the ones above.

Sources (docs/preflight.md has the table with links):
- NVIDIA, "Xid Errors" and its Xid catalog for Ampere and newer
  (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html);
- NVIDIA, "A100/H100 GPU memory error management", Error Recovery and Response Flags
  (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html);
- NVML ``nvmlDeviceGpuRecoveryAction_t`` (None, GPU reset, node reboot, drain P2P, drain and reset);
- NVIDIA Fabric Manager user guide, "Systems Using Fourth Generation NVSwitches" and "What is
  NVLink Subnet Manager?"; spectrocloud/CanvOS#700 (fabric manager's NVL5 precheck needs ib_umad).

Nothing here runs commands; ``host_probe`` gathers, these functions judge.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.inkling.fleet.plugins.module_utils.preflight_checks import (
    check_driver, check_fabric, check_gpus, result)

# --------------------------------------------------------------------------
# Xid events
# --------------------------------------------------------------------------

# Code -> (what it means, level, remedy). Only events that say the GPU (not the application)
# is in trouble; application faults (13, 31, 43, 45, ...) are not listed and never fail a host.
# The meaning follows NVIDIA's Xid catalog; the remedies its resolution buckets (RESET_GPU,
# WORKFLOW_XID_48, ...) and the memory error management guide, in words an operator acts on.
RESET = 'stop the GPU processes and reset the GPU (`nvidia-smi -r -i {index}`) or reboot the host'
XID_CATALOG = {
    48: ('double-bit ECC error (DBE) in GPU memory', 'error',
         RESET + '; if the error comes back or row remapping fails, replace the GPU (RMA)'),
    63: ('GPU memory row remapping (or page retirement) recorded: pending until the GPU is reset', 'error',
         RESET + ' to apply the remap'),
    64: ('GPU memory row remapping (or page retirement) failed', 'error',
         'replace the GPU (RMA): its memory can no longer be repaired by remapping'),
    74: ('NVLink error', 'error',
         RESET + '; if it comes back, have the NVLink/baseboard inspected'),
    79: ('GPU has fallen off the bus', 'error',
         'reboot (power-cycle) the host; if it comes back, check power, cooling and the GPU\'s seating, then RMA'),
    92: ('high single-bit ECC error rate', 'warning',
         'plan a GPU reset at the next maintenance and watch the GPU\'s ECC counters'),
    94: ('contained ECC error (the application using the memory was stopped; the GPU stays usable)', 'warning',
         'nothing for the GPU now; a GPU reset at the next maintenance retires the memory'),
    95: ('uncontained ECC error', 'error', RESET),
    119: ('GSP firmware RPC timeout', 'error', RESET + '; upgrade the driver if it comes back'),
    120: ('GSP firmware error', 'error', RESET + '; upgrade the driver if it comes back'),
    140: ('unrecovered ECC error', 'error', RESET),
    143: ('GPU initialization failure', 'error', 'reboot the host; replace the GPU (RMA) if it comes back'),
    154: ('GPU recovery action changed', 'error', ''),  # the action comes from the message itself
}

# NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.     (drivers since ~450)
# NVRM: Xid (0000:01:00): 3, C 00000005 ...                       (old drivers, no "PCI:")
XID_RE = re.compile(r'NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\):'
                    r'\s*(?P<code>\d+)\b,?\s*(?P<rest>.*)$')
# NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.
# NVRM: GPU at 0000:01:00.0 has fallen off the bus.
# NVRM: The NVIDIA GPU 0000:b3:00.0 / (PCI ID: 10de:26b5) installed in this system has / fallen off the bus ...
FALLEN_RE = re.compile(r'NVRM: (?:GPU (?:at )?|The NVIDIA GPU )(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:'
                       r'[0-9a-fA-F]{2}(?:\.[0-7])?)')
TIME_RE = re.compile(r'\[\s*(?P<t>\d+\.\d+)\]')
# NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-... (the driver names the GPU before its first Xid)
GPU_AT_RE = re.compile(r'NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}):\s*(?P<uuid>GPU-[0-9a-fA-F-]+)')
RECOVERY_RE = re.compile(r'recovery action changed from\s+\S+\s+\(([^)]*)\)\s+to\s+(\S+)\s+\(([^)]*)\)', re.I)


def pci_key(text):
    """'00000000:2B:00.0', '0000:2b:00', 'PCI:0000:2b:00' -> (0, 0x2b, 0) (domain, bus, device)."""
    if not text:
        return None
    match = re.search(r'([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})', str(text))
    if not match:
        return None
    return tuple(int(part, 16) for part in match.groups())


def pci_str(key):
    """(0, 0x2b, 0) -> '0000:2b:00' (as the kernel log writes it)."""
    return '%04x:%02x:%02x' % key if key else 'unknown'


def parse_kernel_log(text):
    """NVRM Xid events (and "fallen off the bus" lines without an Xid) in kernel log text.

    Accepts ``dmesg`` (``[  12.345678] NVRM: ...``), ``journalctl -k -o short-monotonic``, syslog and plain
    ``journalctl -k`` lines. Returns a list of ``{'code', 'pci', 'uuid', 'time_s', 'text', 'detail', 'count'}``,
    one per code and PCI device (Xid 154 also per action), in the order first seen; ``count`` counts the Xid
    lines, ``time_s`` is seconds since boot of the first (None when the line carries no monotonic time),
    ``uuid`` the GPU's UUID when the driver printed it (``NVRM: GPU at PCI:...: GPU-...``).
    """
    events = []
    index = {}
    uuids = {}
    lines = (text or '').splitlines()
    for number, line in enumerate(lines):
        if 'NVRM' not in line:
            continue
        named = GPU_AT_RE.search(line)
        if named:
            uuids[pci_key(named.group('pci'))] = named.group('uuid')
            continue
        match = XID_RE.search(line)
        is_xid = bool(match)
        if match:
            code, pci, detail = int(match.group('code')), match.group('pci'), match.group('rest').strip()
        else:
            fallen = FALLEN_RE.search(line)
            window = ' '.join(lines[number:number + 3]) if 'The NVIDIA GPU' in line else line
            if not (fallen and 'fallen off the bus' in window):
                continue
            code, pci, detail = 79, fallen.group('pci'), 'GPU has fallen off the bus (no Xid line)'
        head = line[:line.index('NVRM')]
        timing = TIME_RE.search(head)
        key_pci = pci_key(pci)
        key = (code, key_pci, recovery_target(detail) if code == 154 else '')
        if key in index:
            # The fallen-off lines beside an Xid 79 are the same incident, not another one.
            if is_xid:
                event = events[index[key]]
                event['count'] = event['count'] + 1 if event['count'] else 1
                if not event['xid_line']:
                    event.update(text=line.strip()[-300:], detail=detail[:200], xid_line=True)
            continue
        index[key] = len(events)
        events.append({'code': code, 'pci': pci_str(key_pci), 'uuid': None,
                       'time_s': float(timing.group('t')) if timing else None,
                       'text': line.strip()[-300:], 'detail': detail[:200], 'count': 1 if is_xid else 0,
                       'xid_line': is_xid})
    for event in events:
        event['uuid'] = uuids.get(pci_key(event['pci']))
        event['count'] = max(event['count'], 1)
        del event['xid_line']
    return events


def _gpu_by_pci(gpu):
    out = {}
    for g in (gpu or {}).get('gpus') or []:
        key = pci_key(g.get('pci_bus_id'))
        if key:
            out[key] = g
    return out


def recovery_target(detail):
    """'GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)' -> 'Node Reboot Required'."""
    match = RECOVERY_RE.search(detail or '')
    return match.group(3).strip() if match else None


def _who(event, by_pci):
    g = by_pci.get(pci_key(event['pci']))
    if g is not None:
        return 'GPU %s (PCI %s)' % (g.get('index'), g.get('pci_bus_id')), g.get('index'), g
    uuid = (' %s' % event['uuid']) if event.get('uuid') else ''
    if not by_pci:
        return ('GPU at PCI %s%s (index unknown: no GPU facts)' % (event['pci'], uuid)), None, None
    return ('GPU at PCI %s%s (not listed by nvidia-smi now)' % (event['pci'], uuid)), None, None


def _when(event):
    if event.get('time_s') is None:
        return 'since boot'
    return '%.0f s after boot' % event['time_s']


def check_xid(events, gpu=None, ignore=(), since_s=0, source=None, error=None):
    """``gpu.xid``: one finding per bad Xid event since boot (after ``since_s``), naming the GPU by index
    and PCI bus id. Xid 154 is judged by the action it names and by the GPU's current recovery action:
    a GPU that reports ``None`` now was already reset."""
    ignore = set(int(c) for c in ignore or ())
    by_pci = _gpu_by_pci(gpu)
    checks = []
    if error and not events:
        return [result('gpu.xid', True, 'kernel log not read', 'no GPU Xid events since boot',
                       message='Xid events not checked: %s' % error, skipped=True)]
    for event in events or []:
        code = event['code']
        if code in ignore or code not in XID_CATALOG:
            continue
        if since_s and event.get('time_s') is not None and event['time_s'] < float(since_s):
            continue
        what, level, remedy = XID_CATALOG[code]
        who, index, g = _who(event, by_pci)
        if code == 154:
            target = recovery_target(event.get('detail'))
            now = (g or {}).get('gpu_recovery_action')
            if target is None or target.lower() == 'none' or (now is not None and now.lower() == 'none'):
                continue
            what = 'GPU recovery action changed to %s' % target
            remedy = recovery_remedy(target, index)
        message = 'Xid %d on %s %s: %s%s' % (
            code, who, _when(event), what, (' (%d times)' % event['count']) if event.get('count', 1) > 1 else '')
        checks.append(result(
            'gpu.xid', False, 'Xid %d on %s' % (code, who), 'no GPU Xid event since boot that means a bad GPU',
            remedy=remedy.replace('{index}', str(index) if index is not None else '<index>')
            + ('' if level == 'warning' else '; then check again (the event stays in the kernel log until '
                                             'reboot: set preflight_xid_since_s past it once the GPU was reset)'),
            level=level, message=message, xid=code, pci=event['pci'], gpu_index=index,
            log_line=event.get('text')))
    if not checks:
        checks.append(result('gpu.xid', True, 'none', 'no GPU Xid event since boot that means a bad GPU',
                             message='no Xid event since boot that means a bad GPU (kernel log: %s)'
                                     % (source or 'unknown')))
    return checks


# --------------------------------------------------------------------------
# recovery action
# --------------------------------------------------------------------------

RECOVERY_REMEDIES = (
    ('drain and reset', 'stop every GPU process on the host (P2P traffic must drain), then reset the GPU '
                        '(`nvidia-smi -r -i {index}`)'),
    ('drain', 'stop every GPU process on the host so that peer-to-peer (NVLink) traffic drains; the action '
              'clears by itself'),
    ('reboot', 'reboot the host: the fault may have left the operating system in an inconsistent state'),
    ('reset', 'stop the GPU processes and reset the GPU (`nvidia-smi -r -i {index}`)'),
)


def recovery_remedy(action, index=None):
    low = (action or '').lower()
    for key, remedy in RECOVERY_REMEDIES:
        if key in low:
            return remedy.replace('{index}', str(index) if index is not None else '<index>')
    return 'follow the recovery action %s (NVIDIA\'s error recovery guide), then check again' % action


def check_recovery_action(gpu):
    """``gpu.recovery_action``: every GPU reports ``None`` (or nothing: an older driver)."""
    gpus = (gpu or {}).get('gpus') or []
    if not gpus:
        return []
    reported = [g for g in gpus if g.get('gpu_recovery_action') is not None]
    bad = [g for g in reported if str(g.get('gpu_recovery_action')).lower() != 'none']
    if not reported:
        return [result('gpu.recovery_action', True, 'not reported', 'None on every GPU',
                       message='GPU recovery action not reported by this driver (field gpu_recovery_action)',
                       skipped=True)]
    if not bad:
        return [result('gpu.recovery_action', True, 'None', 'None on every GPU',
                       message='GPU recovery action None on %d GPUs' % len(reported))]
    found = ', '.join('GPU %s (PCI %s): %s' % (g.get('index'), g.get('pci_bus_id'), g.get('gpu_recovery_action'))
                      for g in bad)
    remedies = []
    for g in bad:
        text = recovery_remedy(g.get('gpu_recovery_action'), g.get('index'))
        if text not in remedies:
            remedies.append(text)
    return [result('gpu.recovery_action', False, found, 'None on every GPU', remedy='; '.join(remedies),
                   message='the driver asks for a recovery action: %s; the GPU cannot serve until it is done' % found)]


# --------------------------------------------------------------------------
# NVLink5 (HGX B200/B300): fabric manager + NVLSM over the InfiniBand stack
# --------------------------------------------------------------------------

NVLINK5_MODULES = ('ib_umad',)
NVLINK5_GUIDE = ('NVIDIA Fabric Manager user guide, "Systems Using Fourth Generation NVSwitches"')


def nvlink5_system(gpu, nvswitch_count=0):
    """'hgx' for an NVLink5 board whose fabric this host manages (B200/B300 HGX: compute capability 10.x,
    NVSwitches or a fabric state), 'rack' for GB200/GB300 compute trays (the NVLink switch trays run
    fabric manager and NVLSM), None otherwise."""
    gpus = (gpu or {}).get('gpus') or []
    if not gpus or not any((g.get('compute_cap_major') or 0) == 10 for g in gpus):
        return None
    names = ' '.join(str(g.get('name') or '') for g in gpus)
    if re.search(r'\bGB[23]00\b', names):
        return 'rack'
    fabric = any(g.get('fabric_state') is not None for g in gpus)
    return 'hgx' if (nvswitch_count or fabric) else None


def check_nvlink5(gpu, facts, unit='nvidia-fabricmanager'):
    """``fabric.nvlink5``: on NVLink5 HGX boards the fabric manager reaches the NVSwitches through the
    InfiniBand management stack (``ib_umad``, ``/dev/infiniband/umad*``) and NVLSM, which its start
    script starts before it; without them the fabric manager does not start and CUDA fails with 802."""
    facts = facts or {}
    kind = nvlink5_system(gpu, facts.get('nvswitch_count'))
    if kind is None:
        return []
    if kind == 'rack':
        return [result('fabric.nvlink5', True, 'GB200/GB300 compute tray', 'fabric managed by the NVLink switch trays',
                       message='NVLink5 rack system: fabric manager and NVLSM run on the NVLink switch trays (NVOS), '
                               'not on this host; only the fabric state is checked here')]
    nv5 = facts.get('nvlink5') or {}
    loaded = set(nv5.get('kernel_modules') or [])
    fm = facts.get('fabricmanager') or {}
    missing_mods = [m for m in NVLINK5_MODULES if m not in loaded]
    nvlsm = nv5.get('nvlsm') or {}
    parts, remedies = [], []
    if nv5.get('kernel_modules') is None:
        parts.append('loaded kernel modules unknown (%s)' % (nv5.get('kernel_modules_error') or 'not read'))
    elif missing_mods:
        parts.append('kernel module %s not loaded (no /dev/infiniband/umad* for the NVSwitch management)'
                     % ', '.join(missing_mods))
        remedies.append('load it now and at every boot: `modprobe %s` and `echo %s > /etc/modules-load.d/'
                        'nvidia-fabricmanager.conf`' % (' '.join(missing_mods), '\\n'.join(missing_mods)))
    if not nvlsm.get('installed'):
        parts.append('NVLink Subnet Manager (nvlsm) not installed')
        remedies.append('install NVIDIA\'s nvlsm package (the NVLink Subnet Manager of the fabric manager\'s '
                        'release, from the CUDA repository)')
    elif fm.get('active') and not nvlsm.get('running'):
        parts.append('nvlsm not running although %s is active' % unit)
    if parts:
        remedies.append('then `systemctl restart %s` (its start script starts NVLSM, waits for the InfiniBand '
                        'devices of the NVSwitches, then starts the fabric manager) and check its journal '
                        '(`journalctl -u %s`); see the %s' % (unit, unit, NVLINK5_GUIDE))
        return [result('fabric.nvlink5', False, '; '.join(parts),
                       'ib_umad loaded, nvlsm installed and running with the fabric manager',
                       remedy='; '.join(remedies),
                       message='NVLink5 HGX board: %s; the fabric manager cannot manage the NVSwitches, CUDA '
                               'fails with error 802 (system not yet initialized)' % '; '.join(parts))]
    return [result('fabric.nvlink5', True, 'ib_umad loaded, nvlsm %s' % ('running' if nvlsm.get('running')
                                                                         else 'installed'),
                   'ib_umad loaded, nvlsm installed and running with the fabric manager',
                   message='NVLink5 HGX board: ib_umad loaded, nvlsm %s'
                           % ('running' if nvlsm.get('running') else 'installed (fabric manager not active)'))]


def nvlink5_fabric_remedy(gpu, facts, unit='nvidia-fabricmanager'):
    """A remedy for fabric.manager and fabric.state that works on NVLink5 HGX boards (None elsewhere). It names
    ib_umad and NVLSM only when the host's facts say they are missing (or cannot tell): a fabric manager that
    died with both in place is restarted and its journal read."""
    facts = facts or {}
    if nvlink5_system(gpu, facts.get('nvswitch_count')) != 'hgx':
        return None
    start = ('`systemctl enable --now %s` (after a crash: `systemctl restart %s`) and read its journal: '
             '`journalctl -u %s`; its version must equal the driver\'s' % (unit, unit, unit))
    nv5 = facts.get('nvlink5')
    if not isinstance(nv5, dict):
        return ('NVLink5 HGX board: the fabric manager needs ib_umad loaded and NVLSM installed (not probed on this '
                'host, see fabric.nvlink5); then %s' % start)
    needs = []
    if nv5.get('kernel_modules') is None:
        needs.append('ib_umad loaded (loaded kernel modules unknown: %s)'
                     % (nv5.get('kernel_modules_error') or 'not read'))
    else:
        missing = [m for m in NVLINK5_MODULES if m not in nv5['kernel_modules']]
        if missing:
            needs.append('%s loaded (not loaded now: `modprobe %s`)' % (', '.join(missing), ' '.join(missing)))
    if not (nv5.get('nvlsm') or {}).get('installed'):
        needs.append('NVLSM installed (nvlsm not found: install NVIDIA\'s nvlsm package)')
    if needs:
        return 'NVLink5 HGX board: the fabric manager needs %s (see fabric.nvlink5); then %s' % (
            ' and '.join(needs), start)
    return 'NVLink5 HGX board, its fabric management stack in place (fabric.nvlink5): %s' % start


def health_checks(gpu, facts, xid_ignore=(), xid_since_s=0, unit='nvidia-fabricmanager'):
    """The checks of this file, for preflight (Xid, recovery action, NVLink5)."""
    facts = facts or {}
    log = facts.get('kernel_log') or {}
    checks = []
    if gpu:
        checks += check_recovery_action(gpu)
    checks += check_xid(log.get('events'), gpu, xid_ignore, xid_since_s, log.get('source'), log.get('error'))
    checks += check_nvlink5(gpu, facts, unit)
    return checks


# --------------------------------------------------------------------------
# the re-check before a drain
# --------------------------------------------------------------------------

RECHECKED = ('driver.kernel_module', 'driver.nvml', 'driver.kernel_module_match', 'gpu.count', 'gpu.mig', 'gpu.ecc',
             'gpu.row_remapping', 'gpu.recovery_action', 'gpu.xid', 'fabric.manager', 'fabric.manager_version',
             'fabric.state', 'fabric.nvlink5')


def recheck(host, gpu, gpu_error, facts, tensor_parallel_size=8, xid_ignore=(), xid_since_s=0,
            unit='nvidia-fabricmanager', nvml_library_version=None):
    """The fast health checks before a drain: the driver answers and matches the loaded module, the GPU count,
    MIG, uncorrectable ECC, row remapping, the recovery action, new Xids, the fabric manager and the fabric
    state (and NVLink5's needs). Returns the same report shape as preflight's ``evaluate``."""
    facts = facts or {}
    checks = check_driver(gpu, gpu_error, facts.get('kernel_module_version'), None,
                          facts.get('userspace_driver_versions'), None, nvml_library_version)
    checks += [c for c in check_gpus(gpu, tensor_parallel_size) if c['check'] in RECHECKED]
    checks += check_fabric(gpu, facts.get('fabricmanager'), facts.get('nvswitch_count') or 0, unit=unit,
                           nvlink5_remedy=nvlink5_fabric_remedy(gpu, facts, unit))
    checks += health_checks(gpu, facts, xid_ignore, xid_since_s, unit)
    failures = [c for c in checks if not c['ok'] and c['level'] == 'error']
    warnings = [c for c in checks if not c['ok'] and c['level'] == 'warning']
    return {'host': host, 'ok': not failures, 'checks': checks, 'failures': failures, 'warnings': warnings}


def recheck_summary(report):
    """One message naming the host and every failure, in preflight's words."""
    count = len(report['failures'])
    lines = ['%s: re-check before the drain failed (%d problem%s); the host is not drained or stopped:'
             % (report['host'], count, '' if count == 1 else 's')]
    for fail in report['failures']:
        lines.append('- [%s] %s; remedy: %s' % (fail['check'], fail['message'], fail['remedy']))
    return '\n'.join(lines)
