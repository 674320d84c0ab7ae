# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure preflight checks for GPU hosts that serve Inkling.

Every function takes plain data (GPU facts from ``inkling.fleet.nvidia_gpu_info``,
host facts from ``inkling.fleet.preflight_host_facts``, the variant) and returns a
list of check results::

    {"check": "fabric.state", "ok": False, "level": "error",
     "found": "...", "expected": "...", "remedy": "...", "message": "..."}

``level`` is ``error`` (the host cannot serve) or ``warning`` (reported, not fatal).
Nothing here runs commands or touches the host, so every field failure in
docs/field-failures.md is a unit test of these functions.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import re

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache

CDI_KIND = 'nvidia.com/gpu'
DEFAULT_CDI_DIRS = ['/etc/cdi', '/var/run/cdi']
NVML_MISMATCH = 'Driver/library version mismatch'
FABRIC_DONE_STATE = 'Completed'
FABRIC_DONE_STATUS = 'Success'
PODMAN_DEFAULT_SHM_MIB = 64
GIB = 1024 ** 3
MIB = 1024 ** 2

_VERSION_RE = re.compile(r'(\d+(?:\.\d+)+)')


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------

def result(check, ok, found, expected, remedy='', level='error', message=None, **extra):
    """Build one check result; ``message`` defaults to a sentence from the parts."""
    if message is None:
        if ok:
            message = '%s: %s' % (check, found)
        else:
            message = '%s: found %s, expected %s' % (check, found, expected)
    res = {
        'check': check,
        'ok': bool(ok),
        'level': level,
        'found': found,
        'expected': expected,
        'remedy': '' if ok else remedy,
        'message': message,
    }
    res.update(extra)
    return res


def parse_version(text):
    """'580.159.04' -> (580, 159, 4); None when no version is in the text."""
    if text is None:
        return None
    match = _VERSION_RE.search(str(text))
    if not match:
        return None
    return tuple(int(p) for p in match.group(1).split('.'))


def version_str(text):
    """The first dotted version in ``text`` as written, or None."""
    if text is None:
        return None
    match = _VERSION_RE.search(str(text))
    return match.group(1) if match else None


def version_ge(found, minimum):
    """True when version ``found`` >= ``minimum`` (missing parts count as 0)."""
    a, b = parse_version(found), parse_version(minimum)
    if a is None or b is None:
        return False
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def versions_equal(a, b):
    """Exact x.y.z match ('580.159.04' == '580.159.4'); a branch name ('580') never matches a full version."""
    pa, pb = parse_version(a), parse_version(b)
    return pa is not None and pa == pb


def human_bytes(num):
    if num is None:
        return 'unknown'
    num = float(num)
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'):
        if abs(num) < 1024 or unit == 'PiB':
            return ('%d %s' % (num, unit)) if unit == 'B' else ('%.1f %s' % (num, unit))
        num /= 1024
    return '%d B' % num  # pragma: no cover


# --------------------------------------------------------------------------
# parsers for command output and files (used by the gather module)
# --------------------------------------------------------------------------

def parse_driver_version_file(text):
    """Kernel module version from /proc/driver/nvidia/version.

    Proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ...``
    Open:        ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...``
    """
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith('NVRM version:'):
            match = re.search(r'Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)', line)
            if match:
                return match.group(1)
            return version_str(line.split(':', 1)[1])
    return None


def parse_fabricmanager_version(text):
    """``Fabric Manager version is : 580.159.04`` (nv-fabricmanager --version) -> '580.159.04'."""
    if not text:
        return None
    for line in text.splitlines():
        if 'version' in line.lower():
            ver = version_str(line)
            if ver:
                return ver
    return version_str(text)


def parse_package_version(text):
    """Package version ``580.159.04-1`` / ``3:580.159.04-1.el9`` -> '580.159.04'."""
    if not text:
        return None
    text = text.strip()
    if ':' in text.split('-')[0]:
        text = text.split(':', 1)[1]
    return version_str(text)


def parse_podman_version(text):
    """``podman version 5.4.2`` -> '5.4.2'."""
    if not text:
        return None
    match = re.search(r'version\s+(\d+(?:\.\d+)+)', text)
    return match.group(1) if match else version_str(text)


def count_nvswitch(lspci_text):
    """Count NVSwitch devices in ``lspci -d 10de:`` output (lines naming NVSwitch or a bridge)."""
    count = 0
    for line in (lspci_text or '').splitlines():
        low = line.lower()
        if 'nvswitch' in low or re.search(r'\bbridge\b', low):
            count += 1
    return count


_YAML_CDI_VERSION_RE = re.compile(r'^cdiVersion:\s*["\']?([0-9][^"\'#\s]*)["\']?')
_YAML_FEATURE_RE = re.compile(r'^\s*-?\s*(additionalGids|intelRdt|netDevices|annotations):')
_YAML_HOSTPATH_RE = re.compile(r'^\s*-?\s*hostPath:\s*["\']?([^"\'#\s]+)["\']?')
_YAML_KIND_RE = re.compile(r'^kind:\s*["\']?([^"\'#\s]+)["\']?')


def _walk_host_paths(node, out):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'hostPath' and isinstance(value, str):
                out.append(value)
            else:
                _walk_host_paths(value, out)
    elif isinstance(node, list):
        for item in node:
            _walk_host_paths(item, out)


# CDI spec features and the spec version that introduced them (tags.cncf.io/container-device-interface,
# specs-go/version.go: requiresV040 ... requiresV110). A library rejects keys it does not know
# ("json: unknown field ...") whatever cdiVersion the spec declares.
CDI_FEATURE_VERSIONS = (
    ('netDevices', '1.1.0'),
    ('additionalGids', '0.7.0'),
    ('intelRdt', '0.7.0'),
    ('annotations', '0.6.0'),
    ('deviceNodes.hostPath', '0.5.0'),
    ('device name starting with a digit', '0.5.0'),
    ('mounts.type', '0.4.0'),
)
CDI_SPEC_VERSIONS = ('0.1.0', '0.2.0', '0.3.0', '0.4.0', '0.5.0', '0.6.0', '0.7.0', '0.8.0', '1.0.0', '1.1.0')


def _cdi_edits(data):
    edits = [data.get('containerEdits') or {}]
    for dev in data.get('devices') or []:
        if isinstance(dev, dict):
            edits.append(dev.get('containerEdits') or {})
    return [e for e in edits if isinstance(e, dict)]


def cdi_required_version(data, line_features=()):
    """(minimum spec version, [features needing it]) of a parsed CDI spec (a dict), as the CDI library's
    MinimumRequiredVersion decides it; ``line_features`` are keys seen by the line reader."""
    found = set(line_features or ())
    if data.get('annotations') or any(isinstance(d, dict) and d.get('annotations') for d in data.get('devices') or []):
        found.add('annotations')
    for dev in data.get('devices') or []:
        name = str((dev or {}).get('name') or '') if isinstance(dev, dict) else ''
        if name[:1].isdigit():
            found.add('device name starting with a digit')
    for edit in _cdi_edits(data):
        if edit.get('additionalGids'):
            found.add('additionalGids')
        if edit.get('intelRdt'):
            found.add('intelRdt')
        if edit.get('netDevices'):
            found.add('netDevices')
        if any(isinstance(n, dict) and n.get('hostPath') for n in edit.get('deviceNodes') or []):
            found.add('deviceNodes.hostPath')
        if any(isinstance(m, dict) and m.get('type') for m in edit.get('mounts') or []):
            found.add('mounts.type')
    need, why = '0.3.0', []
    for feature, version in CDI_FEATURE_VERSIONS:
        if feature in found:
            if parse_version(version) > parse_version(need):
                need, why = version, [feature]
            elif version == need:
                why.append(feature)
    return need, why


def podman_cdi_support(podman_version, table):
    """The row of ``table`` (preflight_podman_cdi_versions, one row per podman minor release ``X.Y``) for
    this podman. Returns (row, newer): the row of its minor release, or of the newest release in the table
    with newer=True when podman is newer than every row; (None, False) when older than the table or unknown."""
    mine = parse_version(podman_version)
    rows = sorted([r for r in table or [] if parse_version(r.get('podman'))], key=lambda r: parse_version(r['podman']))
    if not mine or not rows:
        return None, False
    for row in rows:
        if parse_version(row['podman'])[:2] == mine[:2]:
            return row, False
    if mine[:2] > parse_version(rows[-1]['podman'])[:2]:
        return rows[-1], True
    return None, False


def check_cdi_version(specs, podman, table):
    """``cdi.version``: every CDI spec podman would read declares a cdiVersion the installed podman can parse,
    and uses no key newer than that version."""
    version = (podman or {}).get('version')
    checks = []
    if not version or not table:
        return checks
    row, newer = podman_cdi_support(version, table)
    for spec in specs or []:
        declared = spec.get('cdi_version')
        need = spec.get('required_version') or '0.3.0'
        why = spec.get('required_by') or []
        path = spec.get('path')
        if declared is None:
            continue
        if parse_version(declared) is None or not any(versions_equal(declared, v) for v in CDI_SPEC_VERSIONS):
            checks.append(result(
                'cdi.version', False, 'cdiVersion %s' % declared, 'a released CDI spec version',
                remedy='regenerate the spec: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml',
                message='CDI spec %s declares cdiVersion %s, which is no released CDI spec version' % (path, declared)))
            continue
        effective = need if parse_version(need) > parse_version(declared) else declared
        if parse_version(need) > parse_version(declared):
            checks.append(result(
                'cdi.version', False, 'cdiVersion %s, uses %s (%s)' % (declared, ', '.join(why), need),
                'cdiVersion >= %s' % need,
                remedy='regenerate the spec with nvidia-ctk cdi generate (it declares the version its keys need)',
                message='CDI spec %s declares cdiVersion %s but uses %s, which needs %s: podman rejects it'
                        % (path, declared, ', '.join(why), need)))
            continue
        if row is None:
            continue
        top = row.get('cdi_spec_max')
        uses = (' (it uses %s)' % ', '.join(why)) if why and versions_equal(need, effective) else ''
        if parse_version(effective) > parse_version(top):
            if newer:
                checks.append(result(
                    'cdi.version', False, 'cdiVersion %s, podman %s' % (effective, version),
                    'a podman known to read cdiVersion %s' % effective, level='warning',
                    remedy='check `podman run --device nvidia.com/gpu=all` by hand, and add podman %s to '
                           'preflight_podman_cdi_versions' % version,
                    message='CDI spec %s is cdiVersion %s%s; podman %s is newer than the table (podman %s reads up '
                            'to %s), so whether it reads the spec is not known'
                            % (path, effective, uses, version, row['podman'], top)))
                continue
            first = [r for r in sorted(table, key=lambda r: parse_version(r['podman']))
                     if parse_version(r.get('cdi_spec_max')) >= parse_version(effective)]
            upgrade = ('upgrade podman to %s or newer (it reads CDI specs up to %s)'
                       % (first[0]['podman'], first[0]['cdi_spec_max'])) if first else 'upgrade podman'
            checks.append(result(
                'cdi.version', False, 'cdiVersion %s%s, podman %s reads up to %s' % (effective, uses, version, top),
                'cdiVersion <= %s' % top,
                remedy='%s, or regenerate the spec with a container toolkit that writes cdiVersion %s or lower '
                       '(nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)' % (upgrade, top),
                message='CDI spec %s is cdiVersion %s%s, but podman %s reads CDI specs up to %s (built with '
                        'container-device-interface %s): podman skips the spec and fails with "unresolvable CDI '
                        'devices nvidia.com/gpu=all"'
                        % (path, effective, uses, version, top, row.get('cdi_library', '?'))))
        else:
            checks.append(result('cdi.version', True, 'cdiVersion %s' % effective, 'cdiVersion <= %s' % top,
                                 message='CDI spec %s is cdiVersion %s; podman %s reads up to %s'
                                         % (path, effective, version, top)))
    return checks


def parse_cdi_spec(text, path='', yaml_load=None):
    """Kind, device names and hostPaths of one CDI spec (YAML or JSON).

    ``yaml_load`` is ``yaml.safe_load`` when PyYAML is available on the host;
    without it a line-based reader handles what ``nvidia-ctk cdi generate`` writes.
    Returns ``{'path', 'kind', 'devices', 'host_paths', 'error'}``.
    """
    spec = {'path': path, 'kind': None, 'devices': [], 'host_paths': [], 'error': None,
            'cdi_version': None, 'required_version': None, 'required_by': []}
    data = None
    stripped = (text or '').lstrip()
    try:
        if stripped.startswith('{'):
            data = json.loads(text)
        elif yaml_load is not None:
            data = yaml_load(text)
    except Exception as exc:  # pylint: disable=broad-except
        spec['error'] = 'cannot parse %s: %s' % (path, exc)
        return spec
    if data is not None:
        if not isinstance(data, dict):
            spec['error'] = 'cannot parse %s: not a mapping' % path
            return spec
        spec['kind'] = data.get('kind')
        spec['devices'] = [str(d.get('name')) for d in data.get('devices') or [] if isinstance(d, dict)]
        _walk_host_paths(data, spec['host_paths'])
        spec['cdi_version'] = str(data['cdiVersion']) if data.get('cdiVersion') is not None else None
        spec['required_version'], spec['required_by'] = cdi_required_version(data)
        return spec
    # Line-based fallback. Device names are the ``name`` keys of the items of ``devices:``,
    # written as ``- name: X`` or as ``name: X`` after other keys of the item (nvidia-ctk sorts keys).
    section = None
    features = set()
    item_indent = None
    for line in (text or '').splitlines():
        if not line.strip() or line.lstrip().startswith('#'):
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if indent == 0 and not stripped.startswith('-'):
            section = line.split(':', 1)[0].strip()
            item_indent = None
            kind = _YAML_KIND_RE.match(line)
            if kind:
                spec['kind'] = kind.group(1)
            version = _YAML_CDI_VERSION_RE.match(line)
            if version:
                spec['cdi_version'] = version.group(1)
            continue
        feature = _YAML_FEATURE_RE.match(line)
        if feature:
            features.add(feature.group(1))
        if section == 'devices':
            if item_indent is None and stripped.startswith('- '):
                item_indent = indent
            key_line = None
            if indent == item_indent and stripped.startswith('- '):
                key_line = stripped[2:].strip()
            elif item_indent is not None and indent == item_indent + 2:
                key_line = stripped
            if key_line is not None and key_line.startswith('name:'):
                spec['devices'].append(key_line.split(':', 1)[1].split('#', 1)[0].strip().strip('"\''))
        host = _YAML_HOSTPATH_RE.match(line)
        if host:
            spec['host_paths'].append(host.group(1))
    if spec['kind'] is None:
        spec['error'] = 'cannot parse %s: no kind' % path
    spec['required_version'], spec['required_by'] = cdi_required_version(
        {'devices': [{'name': n} for n in spec['devices']]}, features)
    return spec


def so_versions(host_paths):
    """Driver versions pinned by versioned library paths (``libcuda.so.580.159.04``)."""
    found = set()
    for path in host_paths or []:
        match = re.search(r'\.so\.(\d+\.\d+(?:\.\d+)?)$', path)
        if match:
            found.add(match.group(1))
    return sorted(found, key=parse_version)


def parse_containers_conf_cdi_dirs(text):
    """``cdi_spec_dirs = ["/etc/cdi", ...]`` from a containers.conf; None when not set."""
    dirs = None
    for line in (text or '').splitlines():
        match = re.match(r'^\s*cdi_spec_dirs\s*=\s*\[(.*)\]', line)
        if match:
            dirs = re.findall(r'["\']([^"\']+)["\']', match.group(1))
    return dirs


def parse_apt_history_nvidia(text):
    """Last apt history entry that upgraded or installed an NVIDIA package.

    Returns ``{'commandline', 'start_date', 'packages': [{'name', 'old', 'new'}]}`` or None.
    """
    last = None
    entry = {}
    for line in (text or '').splitlines() + ['']:
        if not line.strip():
            if entry.get('packages'):
                last = entry
            entry = {}
            continue
        key, _sep, value = line.partition(': ')
        if key == 'Start-Date':
            entry['start_date'] = value.strip()
        elif key == 'Commandline':
            entry['commandline'] = value.strip()
        elif key in ('Upgrade', 'Install'):
            for name, versions in re.findall(r'([^\s,]+) \(([^)]*)\)', value):
                if 'nvidia' not in name.lower():
                    continue
                parts = [p.strip() for p in versions.split(',')]
                old = parts[0] if key == 'Upgrade' and len(parts) > 1 else None
                new = parts[-1] if key == 'Upgrade' else parts[0]
                entry.setdefault('packages', []).append({
                    'name': name.split(':')[0], 'old': old, 'new': new})
    return last


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------

# Refusals of inkling.fleet.inkling_variant reported as findings of their own (no other check
# looks at these): the variant check then points at them.
VARIANT_OWN_FINDINGS = {
    'gpu.memory': 'enough GPU memory in the tensor parallel group for the model',
    'driver.version': 'a driver the variant\'s image runs on',
}


def _names(checks):
    return ', '.join(checks)


def check_variant(variant, variant_error, host, refusals=None, failed_checks=(), gpu_known=True):
    """The variant check, reporting each root cause once.

    ``refusals`` are the structured reasons of ``inkling.fleet.inkling_variant`` (each with the
    ``check`` it belongs to). A reason whose check already failed (``failed_checks``: gpu.count,
    gpu.mig, driver.nvml) is not repeated: the variant finding points at that check. Memory and
    driver-floor reasons become findings of their own (``gpu.memory``, ``driver.version``) and
    are pointed at the same way. Reasons about the table (compute capability, no entry) stay in
    the variant finding with their own remedy. Without GPU facts no variant was tried: the
    finding points at driver.nvml.
    """
    expected = 'a variant of the table that fits this host'
    if variant:
        return [result('variant', True, variant.get('name'), 'a variant for these GPUs',
                       message='variant %s selected' % variant.get('name'))]
    failed_checks = set(failed_checks or ())
    checks = []
    pointers = []
    own = []
    if not gpu_known and not refusals:
        pointers.append('driver.nvml')
    for ref in refusals or []:
        name = ref.get('check') or 'variant'
        if name != 'variant' and name in failed_checks:
            if name not in pointers:
                pointers.append(name)
        elif name in VARIANT_OWN_FINDINGS:
            checks.append(result(name, False, ref.get('message'), VARIANT_OWN_FINDINGS[name],
                                 remedy=ref.get('remedy') or 'see the message', message=ref.get('message')))
            if name not in pointers:
                pointers.append(name)
        else:
            own.append(ref)
    if own:
        text = '; '.join(r.get('message') or r.get('reason') or '' for r in own)
        remedy = '; '.join(r.get('remedy') for r in own if r.get('remedy')) or 'see the message'
        message = 'no Inkling variant fits %s: %s' % (host, text)
        if pointers:
            message += '; also blocked by %s' % _names(pointers)
            remedy += '; and fix what %s report%s' % (_names(pointers), '' if len(pointers) > 1 else 's')
        checks.append(result('variant', False, text, expected, remedy=remedy, message=message))
    elif pointers:
        checks.append(result(
            'variant', False, 'refused because of %s' % _names(pointers), expected,
            remedy='fix what %s report%s; the variant is selected once %s'
                   % (_names(pointers), '' if len(pointers) > 1 else 's',
                      'they pass' if len(pointers) > 1 else 'it passes'),
            message='no variant selected: blocked by %s (reported there)' % _names(pointers),
            blocked_by=pointers))
    else:
        error = (variant_error or 'no variant selected').strip()
        checks.append(result(
            'variant', False, error, expected,
            remedy='fix the variant table or inkling_variant_overrides as the message says',
            message='no Inkling variant for %s: %s' % (host, error)))
    return checks


def versions_agree(short, full):
    """True when every part ``short`` has equals ``full``'s: NVML prints ``580.159`` for driver 580.159.04."""
    ps, pf = parse_version(short), parse_version(full)
    return ps is not None and pf is not None and len(ps) <= len(pf) and pf[:len(ps)] == ps


def nvml_library_version(text):
    """The user-space NVML version nvidia-smi prints on a mismatch (``NVML library version: 580.159``),
    as quoted by inkling.fleet.nvidia_gpu_info (``user-space NVML library 580.159``); None when absent."""
    match = re.search(r'NVML library(?: version)?:?\s+(\d+(?:\.\d+)+)', text or '')
    return match.group(1) if match else None


def nvml_mismatch_detail(kernel_module_version, nvml_version=None, userspace_versions=None, cause=''):
    """Both sides of an NVML mismatch: the user-space version nvidia-smi printed (or, when it printed
    none, the installed library versions) and the loaded kernel module."""
    libs = [v for v in userspace_versions or [] if not versions_equal(v, kernel_module_version)]
    if nvml_version:
        user = 'nvidia-smi reports user-space library %s' % nvml_version
        other = [v for v in libs if not versions_agree(nvml_version, v)]
        if cause:
            user += ' (%s)' % cause
        if other:
            user += ', installed libraries %s' % ', '.join(other)
    elif libs:
        user = 'user-space libraries %s' % ', '.join(libs)
        if cause:
            user += ' (%s)' % cause
    else:
        user = 'user-space library version unknown'
        if cause:
            user += ', libraries changed (%s)' % cause
    return '%s, loaded kernel module %s' % (user, kernel_module_version or 'unknown')


def check_driver(gpu, gpu_error, kernel_module_version, min_driver,
                 userspace_versions=None, apt_event=None, nvml_version=None):
    """Driver: NVML answers, kernel module loaded, driver >= the variant's minimum (F4)."""
    checks = []
    # kernel module
    if kernel_module_version:
        checks.append(result('driver.kernel_module', True, kernel_module_version, 'nvidia kernel module loaded',
                             message='nvidia kernel module %s loaded' % kernel_module_version))
    else:
        checks.append(result('driver.kernel_module', False, 'no nvidia kernel module version',
                             'nvidia kernel module loaded',
                             remedy='install the NVIDIA driver (the driver role\'s job) and load it (modprobe nvidia) '
                                    'or reboot',
                             message='nvidia kernel module not loaded (no version file)'))
    # NVML
    if gpu_error or not gpu:
        err = (gpu_error or 'no GPU facts').strip()
        if NVML_MISMATCH.lower() in err.lower():
            nvml_version = nvml_version or nvml_library_version(err)
            userspace = [v for v in (userspace_versions or []) if not versions_equal(v, kernel_module_version)]
            cause = ''
            if apt_event and apt_event.get('commandline'):
                cause = 'upgraded by %s' % apt_event['commandline'].split()[0].rsplit('/', 1)[-1]
            found = 'Failed to initialize NVML: %s' % NVML_MISMATCH
            detail = nvml_mismatch_detail(kernel_module_version, nvml_version, userspace_versions, cause)
            checks.append(result(
                'driver.nvml', False, found, 'nvidia-smi answers (kernel module and user-space libraries equal)',
                remedy='reboot (or unload and reload the nvidia modules) so the kernel module matches the '
                       'libraries; then hold the driver packages (apt-mark hold / dnf versionlock) and exclude '
                       '*nvidia* from unattended upgrades',
                message='NVML driver/library version mismatch: %s; reboot required; pin driver packages' % detail,
                kernel_module_version=kernel_module_version, userspace_versions=userspace,
                nvml_library_version=nvml_version))
        else:
            checks.append(result(
                'driver.nvml', False, err, 'nvidia-smi answers',
                remedy='check the NVIDIA driver installation (nvidia-smi must run); the driver role installs it',
                message='nvidia-smi failed: %s' % err))
        return checks
    driver = gpu.get('driver_version')
    checks.append(result('driver.nvml', True, driver, 'nvidia-smi answers',
                         message='nvidia-smi answers, driver %s' % driver))
    if kernel_module_version and not versions_equal(driver, kernel_module_version):
        checks.append(result(
            'driver.kernel_module_match', False, 'kernel module %s, nvidia-smi driver %s' % (kernel_module_version, driver),
            'equal versions', remedy='reboot so the loaded kernel module matches the installed driver',
            message='loaded kernel module %s != driver %s reported by nvidia-smi; reboot required'
                    % (kernel_module_version, driver)))
    if min_driver:
        ok = version_ge(driver, min_driver)
        checks.append(result(
            'driver.version', ok, driver, '>= %s' % min_driver,
            remedy='upgrade the NVIDIA driver to %s or newer with the driver role (preflight never changes drivers)'
                   % min_driver,
            message=('driver %s >= %s' % (driver, min_driver)) if ok else
                    ('driver %s is older than the minimum %s for this variant' % (driver, min_driver))))
    return checks


def gpu_count_remedy(count, tensor_parallel_size, refusals=None):
    """The gpu.count remedy. The variant table knows which tensor parallel size, if any, this host can
    serve with (inkling_variant's gpu.count refusal says it, or says that no setting fixes it; any of
    its refusals carries it as ``tensor_parallel_advice``): that advice is used when there is one. Without it
    no size is suggested, as one the table does not offer would only be refused by the variant check."""
    for ref in refusals or []:
        if ref.get('check') == 'gpu.count' and ref.get('remedy'):
            return ref['remedy']
    for ref in refusals or []:
        if ref.get('tensor_parallel_advice'):
            return ref['tensor_parallel_advice']
    if count < tensor_parallel_size:
        return ('a GPU is missing or was not detected: check `nvidia-smi -L`, dmesg (Xid/fallen off the bus) and '
                'the hardware; tensor parallel size %d needs %d GPUs' % (tensor_parallel_size, tensor_parallel_size))
    return ('serve from a host with exactly %d GPUs, or add a tested entry of tensor parallel size %d through '
            'inkling_variant_overrides and set inkling_tensor_parallel_size to %d'
            % (tensor_parallel_size, count, count))


def check_gpus(gpu, tensor_parallel_size, refusals=None):
    """Count, MIG, persistence, ECC, row remapping (F2, F5). ``refusals``: inkling_variant's, whose
    gpu.count reason carries the table's advice (see gpu_count_remedy)."""
    if not gpu:
        return []
    checks = []
    gpus = gpu.get('gpus') or []
    count = gpu.get('gpu_count', len(gpus))
    ok = count == tensor_parallel_size
    checks.append(result(
        'gpu.count', ok, count, tensor_parallel_size,
        remedy=gpu_count_remedy(count, tensor_parallel_size, refusals),
        message=('%d GPUs for tensor_parallel_size=%d' % (count, tensor_parallel_size)) if ok else
                ('expected %d GPUs for tensor_parallel_size=%d, found %d'
                 % (tensor_parallel_size, tensor_parallel_size, count))))

    checks.append(check_mig(gpus, tensor_parallel_size))

    off = ', '.join(str(g.get('index')) for g in gpus if g.get('persistence_mode') is False)
    checks.append(result(
        'gpu.persistence', not off, ('off on GPU %s' % off) if off else 'on', 'persistence mode on',
        remedy='enable persistence (nvidia-persistenced, or `nvidia-smi -pm 1`; preflight_fix: true does this)',
        message=('persistence mode off on GPU %s' % off) if off else 'persistence mode on',
        fixable='persistence' if off else None))

    ecc = [g for g in gpus if (g.get('ecc_errors_uncorrected_volatile') or 0) > 0]
    checks.append(result(
        'gpu.ecc', not ecc,
        ', '.join('GPU %s: %s' % (g.get('index'), g.get('ecc_errors_uncorrected_volatile')) for g in ecc) or '0',
        'no uncorrected ECC errors',
        remedy='drain the host; reset the GPU (`nvidia-smi -r`) or reboot; replace the GPU if errors return',
        message=('uncorrected ECC errors on %s' % ', '.join(
            'GPU %s (%s)' % (g.get('index'), g.get('ecc_errors_uncorrected_volatile')) for g in ecc)) if ecc else
        'no uncorrected ECC errors'))

    pending = [g for g in gpus if g.get('remapped_rows_pending')]
    failed = [g for g in gpus if g.get('remapped_rows_failure')]
    parts = []
    if pending:
        parts.append('row remapping pending on GPU %s' % ', '.join(str(g.get('index')) for g in pending))
    if failed:
        parts.append('row remapping failed on GPU %s' % ', '.join(str(g.get('index')) for g in failed))
    checks.append(result(
        'gpu.row_remapping', not parts, '; '.join(parts) or 'none pending or failed',
        'no pending or failed row remapping',
        remedy='pending: reset the GPU or reboot to apply the remap; failed: the GPU needs replacing (RMA)',
        message='; '.join(parts) or 'no pending or failed row remapping'))
    return checks


def check_mig(gpus, tensor_parallel_size):
    """MIG off now and at the next GPU reset (F5). ``mig_mode_pending`` is what the GPU switches to at
    its next reset or reboot; null means MIG is not supported (fine)."""
    def onoff(value):
        return {True: 'Enabled', False: 'Disabled', None: 'N/A'}.get(value, str(value))

    def idx(group):
        return ', '.join(str(g.get('index')) for g in group)

    def ids(group):
        return ','.join(str(g.get('index')) for g in group)

    # on now and after the next reset; on now only; off now but on after the next reset
    enabled = [g for g in gpus if g.get('mig_mode_current') and g.get('mig_mode_pending') is not False]
    until_reset = [g for g in gpus if g.get('mig_mode_current') and g.get('mig_mode_pending') is False]
    pending = [g for g in gpus if not g.get('mig_mode_current') and g.get('mig_mode_pending')]
    if not (enabled or until_reset or pending):
        return result('gpu.mig', True, 'disabled', 'MIG disabled', message='MIG disabled on every GPU')
    parts, remedies = [], []
    if enabled:
        parts.append('MIG enabled on GPU %s' % idx(enabled))
        remedies.append('disable MIG (`nvidia-smi -i %s -mig 0`) with no GPU process running, then reset the GPUs '
                        '(`nvidia-smi -r`) or reboot' % ids(enabled))
    if until_reset:
        parts.append('MIG enabled on GPU %s until the next GPU reset or reboot, which disables it' % idx(until_reset))
        remedies.append('reset the GPUs (`nvidia-smi -i %s -r`) or reboot' % ids(until_reset))
    if pending:
        parts.append('MIG disabled on GPU %s but pending: will be enabled at the next GPU reset or reboot'
                     % idx(pending))
        remedies.append('cancel the pending change (`nvidia-smi -i %s -mig 0`); no reset needed' % ids(pending))
    found = ', '.join('GPU %s current=%s pending=%s' % (g.get('index'), onoff(g.get('mig_mode_current')),
                                                        onoff(g.get('mig_mode_pending')))
                      for g in gpus if g in enabled or g in until_reset or g in pending)
    return result('gpu.mig', False, found, 'MIG disabled, now and after the next reset, on every GPU',
                  remedy='; '.join(remedies),
                  message='%s; vLLM TP=%d needs whole GPUs' % ('; '.join(parts), tensor_parallel_size))


def fabric_incomplete(gpu):
    """GPUs whose fabric state is reported (non-null) and not Completed/Success."""
    bad = []
    for g in (gpu or {}).get('gpus') or []:
        state, status = g.get('fabric_state'), g.get('fabric_status')
        if state is None and status is None:
            continue
        if state != FABRIC_DONE_STATE or status != FABRIC_DONE_STATUS:
            bad.append(g)
    return bad


def fabric_in_progress(gpu):
    """True when some GPU's fabric registration is still running (worth waiting for)."""
    return any(g.get('fabric_state') in ('In Progress', 'Not Started') for g in fabric_incomplete(gpu))


def fabric_progress(gpu):
    """``{'registered', 'total', 'pending'}``: GPUs whose fabric state is Completed, of all GPUs, and
    whether some GPU is still registering (``fabric_in_progress``)."""
    gpus = (gpu or {}).get('gpus') or []
    return {'registered': len([g for g in gpus if g.get('fabric_state') == FABRIC_DONE_STATE]),
            'total': len(gpus), 'pending': fabric_in_progress(gpu)}


def fabric_wait_delay(last_poll, now, wait_s, poll_s):
    """Seconds to sleep before the next poll of the fabric wait, or None when the wait is over.

    Times are seconds since the wait started (the check just before it is the poll at 0).
    Polls fall on the marks poll_s, 2 * poll_s, ... and the last one on wait_s exactly, so
    wait_s=120, poll_s=10 polls at 10, 20, ... 120 s: 12 polls after 12 delays, 120 s waited.
    A poll slower than poll_s moves the next one to the next mark after it started (or at once),
    never past wait_s, and the wait ends only after a poll that started at wait_s (50 ms slack).
    """
    wait_s, poll_s = float(wait_s), float(max(poll_s, 1))
    if last_poll >= wait_s - 0.05:
        return None
    mark = min(wait_s, (int((last_poll + 0.05) // poll_s) + 1) * poll_s)
    return max(mark - now, 0.0)


def fabric_progress_line(host, progress, elapsed, wait_s):
    """One line per round of the fabric wait."""
    line = '%s - fabric registration %d of %d GPUs after %ds of %ds' % (
        host, progress['registered'], progress['total'], int(round(elapsed)), int(wait_s))
    if not progress['pending']:
        line += ', done'
    return line


def wait_for_fabric(poll, sleep, clock, wait_s, poll_s, show=None, host='this host'):
    """The bounded fabric wait (F1): sleep, poll, show one line, until no GPU is registering or
    ``wait_s`` has passed.

    ``poll()`` returns ``(gpu_facts, error)``; ``sleep(s)``, ``clock()`` and ``show(line)`` are
    passed in so that the action plugin supplies the real ones and tests a fake clock.
    Returns ``{'waited_s', 'rounds', 'registered', 'total', 'complete', 'error'}``.
    """
    start = clock()
    out = {'waited_s': 0, 'rounds': 0, 'registered': None, 'total': None, 'complete': False, 'error': None}
    elapsed = 0.0
    while True:
        delay = fabric_wait_delay(elapsed, clock() - start, wait_s, poll_s)
        if delay is None:
            break
        sleep(delay)
        elapsed = clock() - start
        gpu, error = poll()
        out['rounds'] += 1
        out['waited_s'] = int(round(elapsed))
        if error:
            out['error'] = error
            if show:
                show('%s - fabric wait stopped after %ds: %s' % (host, int(round(elapsed)), error))
            break
        progress = fabric_progress(gpu)
        out.update(registered=progress['registered'], total=progress['total'], complete=not progress['pending'])
        if show:
            show(fabric_progress_line(host, progress, elapsed, wait_s))
        if not progress['pending']:
            break
    return out


def check_fabric(gpu, fabricmanager, nvswitch_count, unit='nvidia-fabricmanager', waited_s=0, nvlink5_remedy=None):
    """Fabric manager on NVSwitch systems, fabric state on every GPU (F1, F2, F3).

    ``fabricmanager``: ``{'installed': bool, 'active': bool, 'state': str, 'version': str|None}``.
    ``nvlink5_remedy``: set on NVLink5 HGX boards (gpu_health.nvlink5_fabric_remedy), whose fabric this
    host manages even when lspci shows no NVSwitch; it replaces the remedy for a missing or stopped
    fabric manager (there, starting it is not enough).
    """
    checks = []
    fabricmanager = fabricmanager or {}
    driver = (gpu or {}).get('driver_version')
    if nvswitch_count or nvlink5_remedy:
        board = ('%d NVSwitch devices' % nvswitch_count) if nvswitch_count else 'NVLink5 board'
        if not fabricmanager.get('installed'):
            checks.append(result(
                'fabric.manager', False, '%s not installed' % unit,
                '%s installed and active (%s)' % (unit, board),
                remedy=nvlink5_remedy or
                'install the fabric manager package of exactly driver %s (e.g. nvidia-fabricmanager-%s) '
                'and start %s' % (driver or '<driver>', (driver or 'X').split('.')[0], unit),
                message='%s is not installed on an NVSwitch system (%s); '
                        'install/start FM matching %s' % (unit, board,
                                                          ('driver %s' % driver) if driver else 'the driver')))
        elif not fabricmanager.get('active'):
            checks.append(result(
                'fabric.manager', False, '%s %s' % (unit, fabricmanager.get('state') or 'inactive'),
                '%s active' % unit,
                remedy=nvlink5_remedy or
                'systemctl enable --now %s (preflight_fix: true starts it); check its journal' % unit,
                message='%s is %s on an NVSwitch system (%s); install/start FM matching %s'
                        % (unit, fabricmanager.get('state') or 'inactive', board,
                           ('driver %s' % driver) if driver else 'the driver'),
                fixable='fabricmanager'))
        else:
            checks.append(result('fabric.manager', True, '%s active' % unit, '%s active' % unit,
                                 message='%s active' % unit))
        fm_version = fabricmanager.get('version')
        if (fabricmanager.get('installed') or fm_version) and not driver:
            # Without nvidia-smi there is no driver version to compare with. The loaded kernel module is
            # not one: after an NVML mismatch it is the old driver, and the reboot that driver.nvml asks
            # for loads the installed one (which the fabric manager package was upgraded with).
            checks.append(result(
                'fabric.manager_version', True, fm_version or 'unknown', 'the driver version',
                message='fabric manager %s not compared: nvidia-smi reports no driver version (see driver.nvml); '
                        'compared once nvidia-smi answers' % (fm_version or 'version unknown'),
                skipped=True))
        elif fabricmanager.get('installed') or fm_version:
            ok = bool(fm_version) and versions_equal(fm_version, driver)
            checks.append(result(
                'fabric.manager_version', ok, fm_version or 'unknown', driver or 'the driver version',
                remedy='install the fabric manager package of exactly %s and hold both packages together '
                       '(apt-mark hold / dnf versionlock)' % driver,
                message=('fabric manager %s matches driver' % fm_version) if ok else
                        ('fabric manager %s does not match driver %s' % (fm_version or 'version unknown', driver))))
    bad = fabric_incomplete(gpu)
    reported = [g for g in (gpu or {}).get('gpus') or [] if g.get('fabric_state') is not None]
    if bad:
        states = sorted(set('%s/%s' % (g.get('fabric_state'), g.get('fabric_status')) for g in bad))
        state = bad[0].get('fabric_state')
        total = len((gpu or {}).get('gpus') or [])
        remedy = 'fabric registration is done by nvidia-fabricmanager'
        if nvlink5_remedy:
            remedy += ': %s; then wait' % nvlink5_remedy
        elif nvswitch_count:
            remedy += ': make sure %s is installed, active and of the driver\'s version, then wait' % unit
        else:
            remedy += ' (on the hypervisor when GPUs are passed through to a VM): ask the platform to fix fabric ' \
                      'registration; take the host out of the batch'
        checks.append(result(
            'fabric.state', False, ', '.join(states), '%s/%s on every GPU' % (FABRIC_DONE_STATE, FABRIC_DONE_STATUS),
            remedy=remedy,
            message='fabric registration not complete on %d/%d GPUs after %ds (State=%s); CUDA will fail with '
                    'error 802 (system not yet initialized)' % (len(bad), total, int(waited_s or 0), state)))
    elif reported:
        checks.append(result('fabric.state', True, '%s/%s' % (FABRIC_DONE_STATE, FABRIC_DONE_STATUS),
                             '%s/%s' % (FABRIC_DONE_STATE, FABRIC_DONE_STATUS),
                             message='fabric Completed/Success on %d GPUs' % len(reported)))
    return checks


def podman_cdi_dirs(podman_version, configured_dirs, bad_versions, cdi_dirs=None):
    """The CDI directories podman will read, and why: ``configured`` (cdi_spec_dirs in
    containers.conf), ``known_bad`` (a release of preflight_podman_bad_versions with its own list)
    or ``default``."""
    if configured_dirs:
        return list(configured_dirs), 'configured'
    for bad in bad_versions or []:
        if podman_version and versions_equal(podman_version, bad.get('version')) and bad.get('cdi_spec_dirs'):
            return list(bad['cdi_spec_dirs']), 'known_bad'
    return list(cdi_dirs or DEFAULT_CDI_DIRS), 'default'


def check_podman(podman, min_version, bad_versions, api_key_min_version=None):
    """podman present, new enough for quadlet (F13), not a release known to break CDI (F6); with an API key
    (``api_key_min_version`` given), new enough that the key's secret is not re-created on every run."""
    podman = podman or {}
    version = podman.get('version')
    if not podman.get('found'):
        return [result('podman.version', False, 'podman not found (%s)' % (podman.get('error') or 'not on PATH'),
                       'podman >= %s' % min_version,
                       remedy='install podman %s or newer (the service runs vLLM as a podman quadlet)' % min_version,
                       message='podman is not installed: the service runs vLLM with podman (quadlet needs >= %s)'
                               % min_version)]
    checks = []
    ok = version_ge(version, min_version)
    checks.append(result(
        'podman.version', ok, version or 'unknown', '>= %s' % min_version,
        remedy='upgrade podman to %s or newer (quadlet arrived in 4.4; Debian 12 ships 4.3.1)' % min_version,
        message=('podman %s' % version) if ok else
                ('podman %s has no quadlet support or lacks keys the service uses (needs >= %s); the unit would '
                 'not be generated' % (version, min_version))))
    if ok and api_key_min_version and not version_ge(version, api_key_min_version):
        checks.append(result(
            'podman.api_key', False, 'podman %s with an API key' % version, '>= %s' % api_key_min_version,
            remedy='upgrade podman to %s or newer, or serve without an API key (service_api_key)' % api_key_min_version,
            message='podman %s re-creates the API key\'s secret on every run (containers.podman\'s force before '
                    '%s), which counts as a change and restarts the host on every rollout' % (version, api_key_min_version)))
    for bad in bad_versions or []:
        if versions_equal(version, bad.get('version')):
            # Releases that only change the CDI directories are judged by the CDI check.
            level = 'warning' if bad.get('cdi_spec_dirs') else 'error'
            checks.append(result(
                'podman.known_bad', False, 'podman %s' % version, 'not %s' % bad.get('version'),
                remedy=bad.get('remedy') or 'upgrade podman past %s' % bad.get('version'), level=level,
                message='podman %s is a release known to break: %s' % (version, bad.get('reason', ''))))
    return checks


def check_cdi(gpu, specs, podman, configured_dirs, bad_versions, cdi_dirs=None, cdi_versions=None):
    """A spec for nvidia.com/gpu that lists all GPUs and ``all``, made for the running driver, in a
    directory podman reads (F6, F7)."""
    cdi_dirs = list(cdi_dirs or DEFAULT_CDI_DIRS)
    gpu = gpu or {}
    driver = gpu.get('driver_version')
    nvidia = [s for s in specs or [] if s.get('kind') == CDI_KIND]
    broken = [s for s in specs or [] if s.get('error')]
    regenerate = 'nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (preflight_fix: true does this)'
    checks = []
    for spec in broken:
        checks.append(result('cdi.parse', False, spec['error'], 'a readable CDI spec', remedy=regenerate,
                             level='warning', message=spec['error']))
    if not nvidia:
        return checks + [result(
            'cdi.spec', False, 'no CDI spec for %s in %s' % (CDI_KIND, ' or '.join(cdi_dirs)),
            'a CDI spec for %s' % CDI_KIND,
            remedy='install nvidia-container-toolkit and run ' + regenerate,
            message='no CDI spec for %s in %s; podman cannot pass GPUs to the container'
                    % (CDI_KIND, ' or '.join(cdi_dirs)), fixable='cdi')]
    # Which directories does podman read?
    version = (podman or {}).get('version')
    read_dirs, why = podman_cdi_dirs(version, configured_dirs, bad_versions, cdi_dirs)

    def in_dirs(spec, dirs):
        return any(spec['path'].startswith(d.rstrip('/') + '/') for d in dirs)

    visible = [s for s in nvidia if in_dirs(s, read_dirs)]
    if not visible:
        where = sorted(set(s['path'].rsplit('/', 1)[0] for s in nvidia))
        podman_desc = 'podman %s' % version if version else 'podman'
        because = {'configured': ', as cdi_spec_dirs in containers.conf says',
                   'known_bad': ', a known bug of this release (see podman.known_bad)'}.get(why, '')
        remedy = ('regenerate the spec in /etc/cdi with nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml '
                  '(preflight_fix: true does this), or add %s to cdi_spec_dirs in containers.conf'
                  % ' and '.join(where))
        if why == 'known_bad':
            remedy += ', or upgrade podman'
        checks.append(result(
            'cdi.location', False, 'spec in %s' % ', '.join(where), 'a spec in %s' % ' or '.join(read_dirs),
            remedy=remedy,
            message='CDI spec in %s, but %s reads only %s%s' % (', '.join(where), podman_desc,
                                                                ' and '.join(read_dirs), because),
            fixable='cdi'))
        candidates = nvidia
    else:
        checks.append(result('cdi.location', True, ', '.join(s['path'] for s in visible),
                             'a spec in %s' % ' or '.join(read_dirs),
                             message='CDI spec %s is read by podman' % ', '.join(s['path'] for s in visible)))
        candidates = visible
    checks += check_cdi_version(candidates, podman, cdi_versions)
    names = set()
    for spec in candidates:
        names.update(spec.get('devices') or [])
    gpus = gpu.get('gpus') or []
    missing = []
    if 'all' not in names:
        missing.append('all')
    for g in gpus:
        if str(g.get('index')) not in names and g.get('uuid') not in names:
            missing.append(str(g.get('index')))
    checks.append(result(
        'cdi.devices', not missing,
        ('%d devices; missing %s' % (len(names), ', '.join('%s=%s' % (CDI_KIND, m) for m in missing))) if missing
        else '%d devices' % len(names),
        '%s=all and every GPU (%d)' % (CDI_KIND, len(gpus)),
        remedy='regenerate the spec: ' + regenerate,
        message=(('CDI spec lacks %s' % ', '.join('%s=%s' % (CDI_KIND, m) for m in missing)) if missing else
                 ('CDI spec lists %s=all and %d GPUs' % (CDI_KIND, len(gpus)))),
        fixable='cdi' if missing else None))
    for spec in candidates:
        pinned = so_versions(spec.get('host_paths'))
        other = [v for v in pinned if driver and not versions_equal(v, driver)]
        missing_paths = spec.get('missing_host_paths') or []
        if other or missing_paths:
            built = ', '.join(other) if other else 'another driver'
            checks.append(result(
                'cdi.stale', False, 'built for %s, %d missing hostPath' % (built, len(missing_paths)),
                'generated for driver %s' % driver,
                remedy='regenerate the spec after every driver change: ' + regenerate,
                message='CDI spec %s built for %s, driver is %s (%d missing hostPath%s)'
                        % (spec['path'], built, driver or 'unknown', len(missing_paths),
                           '' if len(missing_paths) == 1 else 's'),
                missing_host_paths=missing_paths[:20], fixable='cdi'))
        elif not driver:
            checks.append(result('cdi.stale', True, spec['path'], 'generated for the running driver',
                                 message='CDI spec %s not compared: nvidia-smi reports no driver version '
                                         '(see driver.nvml)' % spec['path'], skipped=True))
        else:
            checks.append(result('cdi.stale', True, spec['path'], 'generated for driver %s' % driver,
                                 message='CDI spec %s matches driver %s' % (spec['path'], driver)))
    return checks


def disk_requirements(model_size_bytes, margin_pct, existing_model_bytes, image_free_bytes, tmp_free_bytes,
                      staging_missing_bytes=None):
    """Bytes needed per purpose: the snapshot and image pulls.

    With ``staging_missing_bytes`` (the bytes of the new revision's blobs the host does not hold, from the hub's
    file list the controller read), the snapshot needs exactly what hf_cache's own space check will ask:
    ``hf_cache.staging_need``. Without it, an estimate: the variant's size plus the margin, minus every blob held
    (blobs of an older revision counted as if the new one used them)."""
    need_model = 0
    if staging_missing_bytes is not None:
        need_model = hf_cache.staging_need(staging_missing_bytes, margin_pct)
    elif model_size_bytes:
        need_model = int(model_size_bytes * (100 + (margin_pct or 0)) / 100.0) - int(existing_model_bytes or 0)
        need_model = max(need_model, 0)
    return {'hub_cache': need_model, 'graphroot': int(image_free_bytes or 0), 'tmpdir': int(tmp_free_bytes or 0)}


def check_disk(paths, needs, notes=None):
    """Free space where each purpose writes, summed per filesystem.

    ``paths``: purpose -> ``{'path', 'existing', 'device', 'free_bytes'}`` (from the gather module).
    ``needs``: purpose -> bytes. ``notes``: purpose -> how its figure was made (named in the message).
    """
    by_dev = {}
    for purpose, info in sorted((paths or {}).items()):
        if not info or info.get('free_bytes') is None:
            continue
        key = info.get('device', info.get('existing'))
        entry = by_dev.setdefault(key, {'free': info['free_bytes'], 'need': 0, 'purposes': [],
                                        'mount': info.get('existing')})
        entry['need'] += int((needs or {}).get(purpose, 0))
        note = (notes or {}).get(purpose) if (needs or {}).get(purpose) else None
        entry['purposes'].append('%s (%s%s)' % (purpose, info.get('path'), ': ' + note if note else ''))
    checks = []
    for _key, entry in sorted(by_dev.items(), key=lambda kv: str(kv[0])):
        ok = entry['free'] >= entry['need']
        free, purposes = human_bytes(entry['free']), ', '.join(entry['purposes'])
        checks.append(result(
            'host.disk', ok, '%s free at %s' % (human_bytes(entry['free']), entry['mount']),
            '>= %s for %s' % (human_bytes(entry['need']), ', '.join(entry['purposes'])),
            remedy='free space or move preflight_hub_cache_dir / podman graphroot to a larger filesystem',
            message=('%s free at %s for %s' % (free, entry['mount'], purposes)) if ok else
                    ('need %s at %s for %s, %s free' % (human_bytes(entry['need']), entry['mount'], purposes, free))))
    for purpose, info in sorted((paths or {}).items()):
        if info and info.get('free_bytes') is None:
            checks.append(result('host.disk', False, 'cannot stat %s' % info.get('path'), 'a readable filesystem',
                                 remedy='check the path', level='warning',
                                 message='cannot read free space for %s at %s' % (purpose, info.get('path'))))
    return checks


def check_shm(shm_bytes, tensor_parallel_size, ipc_host, min_mib):
    """Shared memory for NCCL (F8): the host's /dev/shm with --ipc=host, the container default otherwise."""
    if tensor_parallel_size <= 1:
        return [result('host.shm', True, 'tensor_parallel_size=1', 'no NCCL shared memory needed',
                       message='tensor_parallel_size=1: no NCCL shared memory needed')]
    shm_mib = int(shm_bytes // MIB) if shm_bytes is not None else None
    if ipc_host:
        ok = shm_mib is not None and shm_mib >= min_mib
        return [result(
            'host.shm', ok, '/dev/shm %s MiB (service uses --ipc=host)' % shm_mib, '>= %d MiB' % min_mib,
            remedy='enlarge /dev/shm on the host (tmpfs size=, e.g. 50% of RAM)',
            message=('/dev/shm %s MiB' % shm_mib) if ok else
                    ('tensor_parallel_size=%d with --ipc=host but host /dev/shm is %s MiB; NCCL needs >= %d MiB'
                     % (tensor_parallel_size, shm_mib, min_mib)))]
    return [result(
        'host.shm', False, 'container /dev/shm left at the podman default (%d MiB); host /dev/shm %s MiB'
        % (PODMAN_DEFAULT_SHM_MIB, shm_mib), '--ipc=host or shm size >= %d MiB' % min_mib,
        remedy='run the service with --ipc=host (preflight_service_ipc_host: true) or --shm-size >= %d MiB' % min_mib,
        level='warning',
        message='tensor_parallel_size=%d but container /dev/shm left at default; add --ipc=host or shm size >= %d MiB '
                '(NCCL fails to create its shared memory segments)' % (tensor_parallel_size, min_mib))]


def check_mounts(variant, exists=None):
    """Every host path the variant mounts into the container must exist (podman refuses to
    start the container otherwise: ``statfs SOURCE: no such file or directory``)."""
    exists = exists or {}
    checks = []
    for mount in (variant or {}).get('mounts') or []:
        source = mount.get('source')
        if not source:
            continue
        found = exists.get(source)
        if found is None:
            continue
        remedy = ('stage %s on the host before the rollout' % source)
        if 'cubin' in source or 'cubin' in (mount.get('target') or ''):
            remedy += (' (FlashInfer cubins: run `flashinfer download-cubin` with the FlashInfer version of the '
                       'variant\'s image on a connected machine and copy the tree there; see docs/variants.md)')
        remedy += ', or change the variant\'s mounts with inkling_variant_overrides'
        checks.append(result(
            'variant.mounts', bool(found), '%s %s' % (source, 'exists' if found else 'is missing'),
            'every host path the variant %s mounts exists' % variant.get('name'), remedy=remedy,
            message=('mount source %s for %s present' % (source, mount.get('target')) if found else
                     'the variant %s mounts %s at %s, but %s does not exist on this host: podman would '
                     'refuse to start the container' % (variant.get('name'), source, mount.get('target'), source))))
    return checks


def check_selinux(mode, container_use_devices=None, label_disable=None):
    """SELinux and the GPU device nodes. Enforcing is fine when the service's container runs with
    ``label=disable`` (the service role writes SecurityLabelDisable=true): SELinux then does not confine
    the container's access to /dev/nvidia*. With labels on, the ``container_use_devices`` boolean must be on."""
    mode = (mode or 'disabled').lower()
    boolean = {True: 'on', False: 'off', None: 'unknown'}[container_use_devices]
    if mode != 'enforcing':
        return [result('host.selinux', True, mode, 'any', message='SELinux %s' % mode)]
    if label_disable:
        return [result('host.selinux', True, 'enforcing, container_use_devices %s' % boolean,
                       'label=disable for the service, or container_use_devices on',
                       message='SELinux enforcing is fine here: the service runs its container with label=disable '
                               '(SecurityLabelDisable=true), so SELinux does not confine its access to /dev/nvidia* '
                               '(container_use_devices is %s and not needed)' % boolean)]
    if container_use_devices:
        return [result('host.selinux', True, 'enforcing, container_use_devices on',
                       'label=disable for the service, or container_use_devices on',
                       message='SELinux enforcing with container_use_devices on: labelled containers may use '
                               '/dev/nvidia*')]
    remedy = ('turn the boolean on (`setsebool -P container_use_devices on`), or run the service with '
              'label=disable (preflight_service_label_disable: true, which the service role does)')
    if container_use_devices is False:
        return [result('host.selinux', False, 'enforcing, container_use_devices off',
                       'label=disable for the service, or container_use_devices on', remedy=remedy,
                       message='SELinux enforcing, container_use_devices off and the service keeps SELinux labels: '
                               'the container cannot open /dev/nvidia* and vLLM sees no GPU')]
    return [result('host.selinux', False, 'enforcing, container_use_devices unknown',
                   'label=disable for the service, or container_use_devices on', level='warning', remedy=remedy,
                   message='SELinux enforcing and the service keeps SELinux labels; container_use_devices could not '
                           'be read: the container may be denied /dev/nvidia*')]


# --------------------------------------------------------------------------
# everything together
# --------------------------------------------------------------------------

def check_root(host, user):
    """Every task on a GPU host runs as root (become): without it, podman reports rootless storage and the disk
    check measures the wrong filesystem. Unknown (an older facts module) passes."""
    if not user or user.get('uid') is None or user.get('uid') == 0:
        return []
    name = user.get('name') or str(user.get('uid'))
    return [result('host.root', False, 'user %r (uid %s)' % (name, user.get('uid')), 'root (uid 0)',
                   remedy='set ansible_become: true (sudo) in the inventory, for the GPU hosts',
                   message="%s: tasks run as %r, not root: set ansible_become: true (sudo) in the inventory"
                   % (host, name))]


LOOPBACK = ('127.0.0.1', '::1', 'localhost')


def check_api_key(host, service_host, has_key, allow_open):
    """A vLLM server reachable beyond loopback needs an API key (docs/security.md): with host networking
    it answers everyone who reaches the host. ``service_host`` None: not checked (the caller runs no service)."""
    if service_host is None:
        return []
    listen = str(service_host).strip()
    loopback = listen in LOOPBACK or listen.startswith('127.')
    if has_key or loopback or allow_open:
        how = 'an API key' if has_key else ('loopback only' if loopback else 'open on purpose (service_allow_no_api_key)')
        return [result('service.api_key', True, '%s on %s' % (how, listen), 'an API key beyond loopback')]
    return [result('service.api_key', False, 'no API key, listening on %s' % listen,
                   'an API key (service_api_key) for a server reachable beyond loopback',
                   remedy='set service_api_key (from vault), or service_host: 127.0.0.1, or service_allow_no_api_key: '
                          'true when an authenticating gateway is meant to be the only guard',
                   message='%s: vLLM would listen on %s with no API key, open to anyone who reaches the host'
                           % (host, listen))]


def evaluate(host, gpu=None, gpu_error=None, host_facts=None, variant=None, variant_error=None,
             tensor_parallel_size=8, podman_min_version='4.4', podman_bad_versions=None,
             cdi_dirs=None, disk_margin_pct=10, image_free_bytes=0, tmp_free_bytes=0,
             shm_min_mib=1024, service_ipc_host=True, fabricmanager_unit='nvidia-fabricmanager',
             fabric_waited_s=0, mount_sources=None, variant_refusals=None, nvml_library_version=None,
             podman_cdi_versions=None, service_label_disable=True, extra_checks=None, nvlink5_remedy=None,
             podman_api_key_min_version=None, service_listen=None):
    """Run every check; return ``{'ok', 'checks', 'failures', 'warnings', 'fixable', 'fabric_pending'}``.

    ``extra_checks`` are results made elsewhere (gpu_health: Xid, recovery action, NVLink5), added before
    the variant check. The variant check runs last: a refusal whose root cause another check reports points at it.
    """
    facts = host_facts or {}
    variant = variant or None
    checks = check_root(host, facts.get('effective_user'))
    if checks:
        # Everything else would be measured as that user (rootless podman, its storage): say this once, alone.
        return {'host': host, 'ok': False, 'checks': checks, 'failures': checks, 'warnings': [], 'fixable': [],
                'fabric_pending': False}
    checks += check_driver(gpu, gpu_error, facts.get('kernel_module_version'),
                           (variant or {}).get('min_driver'), facts.get('userspace_driver_versions'),
                           facts.get('apt_nvidia_event'), nvml_library_version)
    checks += check_gpus(gpu, tensor_parallel_size, variant_refusals)
    checks += check_fabric(gpu, facts.get('fabricmanager'), facts.get('nvswitch_count') or 0,
                           unit=fabricmanager_unit, waited_s=fabric_waited_s, nvlink5_remedy=nvlink5_remedy)
    checks += list(extra_checks or [])
    podman = facts.get('podman') or {}
    checks += check_podman(podman, podman_min_version, podman_bad_versions, podman_api_key_min_version)
    if service_listen:
        checks += check_api_key(host, service_listen.get('host'), bool(service_listen.get('api_key')),
                                bool(service_listen.get('allow_no_api_key')))
    checks += check_cdi(gpu, facts.get('cdi_specs'), podman, facts.get('containers_conf_cdi_spec_dirs'),
                        podman_bad_versions, cdi_dirs, podman_cdi_versions)
    model_size = ((variant or {}).get('model') or {}).get('size_bytes')
    missing = facts.get('hub_cache_staging_missing_bytes')
    needs = disk_requirements(model_size, disk_margin_pct, facts.get('hub_cache_model_bytes'),
                              image_free_bytes, tmp_free_bytes, missing)
    notes = {'hub_cache': ('%s of the new revision\'s blobs not held + %s%% margin' % (
        human_bytes(missing), disk_margin_pct)) if missing is not None else
        'estimated from model.size_bytes: the hub\'s file list was not read'}
    checks += check_disk(facts.get('disk'), needs, notes)
    if variant and not model_size:
        checks.append(result('host.disk_model_size', False, 'model.size_bytes unknown for %s' % variant.get('name'),
                             'a known download size', level='warning',
                             remedy='set model.size_bytes for this variant (inkling_variant_overrides)',
                             message='free space for the model snapshot not checked: variant %s has no '
                                     'model.size_bytes' % variant.get('name')))
    checks += check_mounts(variant, mount_sources)
    checks += check_shm(facts.get('shm_bytes'), tensor_parallel_size, service_ipc_host, shm_min_mib)
    checks += check_selinux(facts.get('selinux'), facts.get('selinux_container_use_devices'), service_label_disable)
    failed_checks = set(c['check'] for c in checks if not c['ok'] and c['level'] == 'error')
    checks += check_variant(variant, variant_error, host, variant_refusals, failed_checks,
                            gpu_known=bool(gpu) and not gpu_error)
    failures = [c for c in checks if not c['ok'] and c['level'] == 'error']
    warnings = [c for c in checks if not c['ok'] and c['level'] == 'warning']
    fixable = sorted(set(c['fixable'] for c in failures + warnings if c.get('fixable')))
    return {
        'host': host,
        'ok': not failures,
        'checks': checks,
        'failures': failures,
        'warnings': warnings,
        'fixable': fixable,
        'fabric_pending': fabric_in_progress(gpu),
    }


def summary(report):
    """One message naming the host and every failure, for ``fail``."""
    count = len(report['failures'])
    lines = ['%s: preflight failed (%d problem%s):' % (report['host'], count, '' if count == 1 else 's')]
    for fail in report['failures']:
        lines.append('- [%s] %s; remedy: %s' % (fail['check'], fail['message'], fail['remedy']))
    return '\n'.join(lines)


# The options of inkling.fleet.preflight_evaluate (its DOCUMENTATION describes them).
EVALUATE_ARGUMENT_SPEC = dict(
    host=dict(type='str', required=True),
    gpu=dict(type='dict'),
    gpu_error=dict(type='str'),
    host_facts=dict(type='dict', required=True),
    variant=dict(type='dict'),
    variant_error=dict(type='str'),
    tensor_parallel_size=dict(type='int', default=8),
    podman_min_version=dict(type='str', default='4.4'),
    podman_api_key_min_version=dict(type='str', no_log=False),
    service_listen=dict(type='dict', no_log=False),
    podman_bad_versions=dict(type='list', elements='dict', default=[]),
    cdi_dirs=dict(type='list', elements='path', default=['/etc/cdi', '/var/run/cdi']),
    disk_margin_pct=dict(type='int', default=10),
    image_free_bytes=dict(type='int', default=0),
    tmp_free_bytes=dict(type='int', default=0),
    shm_min_mib=dict(type='int', default=1024),
    service_ipc_host=dict(type='bool', default=True),
    fabricmanager_unit=dict(type='str', default='nvidia-fabricmanager'),
    fabric_waited_s=dict(type='int', default=0),
    variant_refusals=dict(type='list', elements='dict', default=[]),
    nvml_library_version=dict(type='str'),
    podman_cdi_versions=dict(type='list', elements='dict', default=[]),
    service_label_disable=dict(type='bool', default=True),
    xid_ignore=dict(type='list', elements='int', default=[]),
    xid_since_s=dict(type='float', default=0),
    replica_rdma_dir=dict(type='path', default='/sys/class/infiniband'),
    replica_rdma_required=dict(type='bool', default=True),
    replica_probe_timeout_s=dict(type='float', default=3),
)
