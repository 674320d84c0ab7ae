# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Read-only probes of a GPU host shared by preflight_host_facts and preflight_recheck.

Each probe takes the AnsibleModule (for ``get_bin_path`` and ``run_command``) and returns plain
data; nothing is changed on the host. The judging is done by preflight_checks and gpu_health.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os
import re
import pwd

from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc
from ansible_collections.inkling.fleet.plugins.module_utils.gpu_health import parse_kernel_log

# Since boot from the journal (survives the ring buffer wrapping on a host up for months), else the ring buffer.
KERNEL_LOG_COMMANDS = (
    ('journalctl -k -b', ['journalctl', '-k', '-b', '0', '--no-pager', '-q', '-o', 'short-monotonic']),
    ('dmesg', ['dmesg']),
)


def effective_user():
    """The uid and name the module runs as (become, or not)."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return {'uid': uid, 'name': name}


def read_text(path, limit=4 * 1024 * 1024):
    try:
        with open(path, 'r') as handle:
            return handle.read(limit)
    except (IOError, OSError):
        return None


def run(module, args):
    """rc, stdout, stderr; rc None when the binary is missing."""
    binary = args[0]
    if os.path.sep not in binary:
        # PATH first (get_bin_path adds the sbin directories after it).
        found = module.get_bin_path(binary)
        if not found:
            return None, '', '%s not found' % binary
        args = [found] + list(args[1:])
    elif not os.access(binary, os.X_OK):
        return None, '', '%s not found' % binary
    rc, out, err = module.run_command(args, environ_update={'LC_ALL': 'C'})
    return rc, out, err


def fabricmanager_facts(module, unit, fabricmanager_path):
    """Unit state (systemctl show) and version (``nv-fabricmanager --version``, then dpkg or rpm)."""
    fm = {'unit': unit, 'installed': False, 'active': False, 'state': None, 'version': None, 'version_source': None}
    rc, out, _err = run(module, ['systemctl', 'show', unit, '--property=LoadState,ActiveState,SubState'])
    if rc == 0:
        props = dict(line.split('=', 1) for line in out.splitlines() if '=' in line)
        fm['installed'] = props.get('LoadState') == 'loaded'
        fm['state'] = props.get('ActiveState')
        fm['active'] = props.get('ActiveState') == 'active'
    rc, out, err = run(module, [fabricmanager_path, '--version'])
    if rc is not None:
        fm['version'] = pc.parse_fabricmanager_version(out + '\n' + err)
        fm['version_source'] = fabricmanager_path if fm['version'] else None
    if not fm['version']:
        rc, out, _err = run(module, ['dpkg-query', '-W', '-f=${Package} ${Version} ${db:Status-Abbrev}\n',
                                     'nvidia-fabricmanager*', 'cuda-drivers-fabricmanager*'])
        if rc is not None:
            for line in out.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[2].startswith('ii') and 'fabricmanager' in parts[0]:
                    fm['version'] = pc.parse_package_version(parts[1])
                    fm['version_source'] = 'dpkg:%s' % parts[0]
                    break
    if not fm['version']:
        rc, out, _err = run(module, ['rpm', '-q', '--qf', '%{NAME} %{VERSION}\n',
                                     'nvidia-fabric-manager', 'nvidia-fabricmanager'])
        if rc is not None:
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 2 and 'not installed' not in line:
                    fm['version'] = pc.parse_package_version(parts[1])
                    fm['version_source'] = 'rpm:%s' % parts[0]
                    break
    if fm['version'] and not fm['installed'] and fm['state'] is None:
        fm['installed'] = True
    return fm


def nvswitch_facts(module, lspci_path):
    """(count, lines, error) of ``lspci -d 10de:``; count None when lspci is missing or fails."""
    rc, out, err = run(module, [lspci_path, '-d', '10de:'])
    if rc == 0:
        return pc.count_nvswitch(out), out.splitlines(), None
    return None, [], (err or out).strip()


def kernel_log(module, commands=KERNEL_LOG_COMMANDS):
    """NVRM events of the kernel log since boot: ``{'source', 'events', 'nvrm_lines', 'error'}``.

    The first command that answers with any line is used; a journal without kernel messages (a
    container, or journald not reading /dev/kmsg) falls through to dmesg.
    """
    errors = []
    for name, argv in commands:
        rc, out, err = run(module, argv)
        if rc is None:
            errors.append('%s: not installed' % argv[0])
            continue
        if rc != 0:
            errors.append('%s: rc=%s %s' % (name, rc, (err or out).strip()[:200]))
            continue
        if not out.strip():
            errors.append('%s: no kernel messages' % name)
            continue
        nvrm = [line for line in out.splitlines() if 'NVRM' in line]
        return {'source': name, 'events': parse_kernel_log('\n'.join(nvrm)),
                'nvrm_lines': len(nvrm), 'error': None}
    return {'source': None, 'events': [], 'nvrm_lines': 0, 'error': '; '.join(errors) or 'no kernel log'}


def process_running(name, proc='/proc'):
    """True when a process named ``name`` (comm, or argv[0]'s base name) runs."""
    for path in glob.glob(os.path.join(proc, '[0-9]*')):
        comm = (read_text(os.path.join(path, 'comm'), 256) or '').strip()
        if comm == name:
            return True
        cmdline = read_text(os.path.join(path, 'cmdline'), 4096) or ''
        argv0 = cmdline.split('\0', 1)[0]
        if argv0 and os.path.basename(argv0) == name:
            return True
    return False


def nvlink5_facts(module, kernel_modules_file='/proc/modules'):
    """What an NVLink5 HGX board's fabric management needs: loaded kernel modules, InfiniBand and umad
    devices, the nvlsm binary and process."""
    text = read_text(kernel_modules_file, 1024 * 1024)
    modules = None if text is None else sorted(set(line.split()[0] for line in text.splitlines() if line.strip()))
    nvlsm = module.get_bin_path('nvlsm')
    return {
        'kernel_modules': modules,
        'kernel_modules_error': None if text is not None else 'cannot read %s' % kernel_modules_file,
        'infiniband_devices': sorted(os.path.basename(p) for p in glob.glob('/sys/class/infiniband/*')),
        'umad_devices': sorted(os.path.basename(p) for p in glob.glob('/dev/infiniband/umad*')),
        'nvlsm': {'installed': bool(nvlsm), 'path': nvlsm, 'running': process_running('nvlsm')},
    }


def selinux_mode(module):
    rc, out, _err = run(module, ['getenforce'])
    if rc == 0 and out.strip():
        return out.strip().lower()
    text = read_text('/sys/fs/selinux/enforce')
    if text is None:
        return 'disabled'
    return 'enforcing' if text.strip() == '1' else 'permissive'


def selinux_boolean(module, name):
    """True/False for an SELinux boolean (getsebool, else /sys/fs/selinux/booleans), None when unknown."""
    rc, out, _err = run(module, ['getsebool', name])
    if rc == 0:
        match = re.search(r'-->\s*(on|off)', out)
        if match:
            return match.group(1) == 'on'
    text = read_text('/sys/fs/selinux/booleans/%s' % name, 64)
    if text and text.split():
        return text.split()[0] == '1'
    return None
