#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Lab only: every file a lab host container needs, packed as one tar archive.

lab/playbooks/prepare-hosts.yml runs this on the controller once per host, ships the archive
and unpacks it over the host's / (docs/lab.md, "Settings the lab writes on hosts"). What it
holds:
  - podman and systemd settings for nested podman (lab/playbooks/files/);
  - the lab CA, trusted by podman for the lab registry and system-wide (when --ca is given);
  - the nvidia-smi stand-in and its GPU profiles, with the host's profile selected
    (lab/nvidia-smi/);
  - the state of a healthy GPU host around its GPUs: driver version files, loaded kernel
    modules, kernel log, NVIDIA PCI devices for the lspci stand-in, CDI specs, fake driver
    libraries, the fabric manager and device-node units, the stand-in scripts
    (lab/gpu-host/README.md).
The driver version and GPU UUIDs come from the nvidia-smi stand-in itself (faults ignored), so
both stand-ins describe the same board. The archive is the same, byte for byte, for the same
inputs (names in order, owner root, a fixed modification time), so the playbook ships and
unpacks it only when something changed. Prints a JSON object: the units to enable and start,
the driver, the GPU count.
Needs Python 3 and jinja2 (the controller's Ansible has it).
"""

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tarfile

import jinja2

LAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 2026-01-01T00:00:00Z: the modification time of every member (a fixed one keeps the archive stable).
MTIME = 1767225600

# HGX/SXM boards carry NVSwitch bridges; a 2-GPU VM guest sees none (fabric manager runs on
# the hypervisor). NVLink5 (B200): the fabric manager reaches the NVSwitches through the
# InfiniBand stack (ib_umad) and NVLSM; the lab lists those modules and runs an nvlsm stand-in.
BOARDS = {
    'h200-8': {'nvswitch_count': 4, 'gpu': 'GH100 [H200 SXM 141GB] (rev a1)', 'switch': 'GH100 [H100 NVSwitch] (rev a1)'},
    'h100-8': {'nvswitch_count': 4, 'gpu': 'GH100 [H100 SXM5 80GB] (rev a1)', 'switch': 'GH100 [H100 NVSwitch] (rev a1)'},
    'b200-8': {'nvswitch_count': 2, 'gpu': 'GB100 [B200] (rev a1)', 'switch': 'GB100 [B200 NVSwitch] (rev a1)',
               'nvlink5': True},
}
DEFAULT_BOARD = {'nvswitch_count': 0, 'gpu': 'Device 2335 (rev a1)', 'switch': ''}

SCRIPTS = (
    ('nv-fabricmanager', '/usr/bin/nv-fabricmanager'),
    ('lspci', '/usr/local/bin/lspci'),
    ('podman', '/usr/local/bin/podman'),
    ('gpu-host-boot', '/usr/local/libexec/inkling-lab/gpu-host-boot'),
    ('inkling-lab-gpu-fault', '/usr/local/sbin/inkling-lab-gpu-fault'),
    ('journalctl', '/usr/local/bin/journalctl'),
    ('nvlsm', '/usr/bin/nvlsm'),
)
SETTINGS = (
    # podman's cgroups v1 warning silenced in systemd services
    ('50-inkling-lab-env.conf', '/etc/systemd/system.conf.d/50-inkling-lab-env.conf'),
    # nested podman storage (vfs), runtime and limits
    ('storage.conf', '/etc/containers/storage.conf'),
    ('50-inkling-lab.conf', '/etc/containers/containers.conf.d/50-inkling-lab.conf'),
)
# Directories the archive names, so that a fresh host gets them with these modes (the unpack
# leaves directories the host already has as they are).
DIRECTORIES = (
    '/etc/inkling-lab', '/etc/inkling-lab/faults', '/usr/local/share/inkling-lab',
    '/usr/local/share/inkling-lab/profiles', '/usr/local/share/inkling-lab/cdi', '/usr/local/libexec/inkling-lab',
    '/etc/cdi',
)


class HostTreeError(Exception):
    pass


def profiles():
    folder = os.path.join(LAB, 'nvidia-smi', 'profiles')
    return sorted(name[:-len('.json')] for name in os.listdir(folder) if name.endswith('.json'))


def read_gpus(profile):
    """The profile's GPUs as the nvidia-smi stand-in lists them: [{index, uuid, name, driver}]."""
    env = dict(os.environ, INKLING_LAB_PROFILE=profile,
               INKLING_LAB_PROFILES_DIR=os.path.join(LAB, 'nvidia-smi', 'profiles'),
               INKLING_LAB_CONF_DIR='/nonexistent', INKLING_LAB_FAULTS_DIR='/nonexistent')
    res = subprocess.run([sys.executable, os.path.join(LAB, 'nvidia-smi', 'nvidia-smi'),
                          '--query-gpu=index,uuid,name,driver_version', '--format=csv,noheader'],
                         env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0 or not res.stdout.strip():
        raise HostTreeError('the nvidia-smi stand-in gave no GPUs for profile %s (rc %d): %s'
                            % (profile, res.returncode, (res.stderr or res.stdout).strip()))
    rows = csv.reader(io.StringIO(res.stdout), skipinitialspace=True)
    return [dict(zip(('index', 'uuid', 'name', 'driver'), row)) for row in rows if row]


def lspci_lines(gpus, board):
    lines = ['%02x:00.0 3D controller: NVIDIA Corporation %s' % (24 + int(gpu['index']), board['gpu']) for gpu in gpus]
    lines += ['%02x:00.0 Bridge: NVIDIA Corporation %s' % (5 + n, board['switch']) for n in range(board['nvswitch_count'])]
    return ''.join(line + '\n' for line in lines)


def render(env, name, **values):
    text = env.get_template(name).render(**values)
    return text if text.endswith('\n') else text + '\n'


def host_files(hostname, profile, libdir='/usr/lib/x86_64-linux-gnu', stale_driver='570.133.20',
               registry='lab-registry:5000', ca_cert=None):
    """{path on the host: (mode, bytes)} for one lab host, and the units to start."""
    if profile not in profiles():
        raise HostTreeError('%s: lab_gpu_profile is %s; set it to one of %s (lab/nvidia-smi/profiles/)'
                            % (hostname, profile, ', '.join(profiles())))
    gpus = read_gpus(profile)
    driver = gpus[0]['driver']
    board = BOARDS.get(profile, DEFAULT_BOARD)
    nvlink5 = bool(board.get('nvlink5'))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(LAB, 'gpu-host', 'templates')),
                             trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    files = {}

    def source(*parts):
        with open(os.path.join(LAB, *parts), 'rb') as handle:
            return handle.read()

    def text(path, content, mode=0o644):
        files[path] = (mode, content.encode('utf-8'))

    for name, path in SETTINGS:
        files[path] = (0o644, source('playbooks', 'files', name))
    if ca_cert:
        with open(ca_cert, 'rb') as handle:
            ca = handle.read()
        files['/etc/containers/certs.d/%s/ca.crt' % registry] = (0o644, ca)
        files['/usr/local/share/ca-certificates/inkling-lab-ca.crt'] = (0o644, ca)
    # The nvidia-smi stand-in and its profiles, the host's profile selected.
    files['/usr/bin/nvidia-smi'] = (0o755, source('nvidia-smi', 'nvidia-smi'))
    for name in profiles():
        files['/usr/local/share/inkling-lab/profiles/%s.json' % name] = (0o644, source('nvidia-smi', 'profiles', name + '.json'))
    text('/etc/inkling-lab/profile', profile + '\n')
    # The board around the GPUs.
    share = '/usr/local/share/inkling-lab/'
    text(share + 'driver-version', driver + '\n')
    text(share + 'fabricmanager-version', driver + '\n')
    text(share + 'gpu-count', '%d\n' % len(gpus))
    text(share + 'lspci-nvidia.txt', lspci_lines(gpus, board))
    modules = render(env, 'proc-modules.j2', nvlink5=nvlink5)
    text(share + 'proc-modules', modules)
    text('/etc/inkling-lab/proc-modules', modules)
    text(share + 'kernel-log', render(env, 'kernel-log.j2', inventory_hostname=hostname, driver=driver))
    version = render(env, 'proc-driver-nvidia-version.j2', driver=driver)
    text(share + 'proc-driver-nvidia-version', version)
    text('/etc/inkling-lab/proc-driver-nvidia-version', version)
    if nvlink5:
        text(share + 'nvlink5', 'NVLink5: the fabric manager needs ib_umad and starts nvlsm\n')
    for name, path in SCRIPTS:
        files[path] = (0o755, source('gpu-host', 'files', name))
    for lib in ('libcuda.so', 'libnvidia-ml.so'):
        text('%s/%s.%s' % (libdir, lib, driver), '')
    for path, spec_driver, gids in ((share + 'cdi/nvidia.yaml', driver, []),
                                    (share + 'cdi/nvidia-stale.yaml', stale_driver, []),
                                    (share + 'cdi/nvidia-gids.yaml', driver, [44]),
                                    ('/etc/cdi/nvidia.yaml', driver, [])):
        text(path, render(env, 'nvidia-cdi.yaml.j2', driver=spec_driver, additional_gids=gids, gpus=gpus, libdir=libdir))
    units = ['inkling-lab-gpu-host.service'] + (['nvidia-fabricmanager.service'] if board['nvswitch_count'] > 0 else [])
    for unit in units:
        files['/etc/systemd/system/' + unit] = (0o644, source('gpu-host', 'files', unit))
    # On a real Blackwell host the operator stages the FlashInfer cubins (flashinfer
    # download-cubin) where the sm100 variants mount them from; the lab stands in with an
    # empty tree (the vLLM stand-in needs no kernels). Preflight checks the path exists.
    if profile.startswith('b200'):
        text('/var/lib/inkling/flashinfer-cubins/README.lab',
             'Lab stand-in: a real host holds the output of `flashinfer download-cubin` here.\n')
    return files, {'units': units, 'driver': driver, 'gpus': len(gpus)}


def directories(files):
    """Every directory above the files, plus DIRECTORIES (empty ones such as the faults folder)."""
    found = set(DIRECTORIES)
    for path in files:
        parent = os.path.dirname(path)
        while parent not in ('/', ''):
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found)


def pack(files):
    """The archive's bytes: directories then files, in name order, owned by root, fixed mtime."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w', format=tarfile.GNU_FORMAT) as tar:
        members = [(d, None) for d in directories(files)] + sorted(files.items())
        for path, entry in sorted(members, key=lambda m: m[0]):
            info = tarfile.TarInfo('.' + path)
            info.uid = info.gid = 0
            info.uname = info.gname = 'root'
            info.mtime = MTIME
            if entry is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.mode, data = entry
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hostname', required=True)
    parser.add_argument('--profile', required=True, help='nvidia-smi stand-in profile (h200-8, b200-8, ...)')
    parser.add_argument('--libdir', default='/usr/lib/x86_64-linux-gnu')
    parser.add_argument('--stale-driver', default='570.133.20')
    parser.add_argument('--registry', default='lab-registry:5000')
    parser.add_argument('--ca', help='the lab CA certificate (left out when not given or empty)')
    parser.add_argument('--out', required=True, help='the archive to write (rewritten only when it differs)')
    args = parser.parse_args(argv)
    try:
        files, facts = host_files(args.hostname, args.profile, libdir=args.libdir, stale_driver=args.stale_driver,
                                  registry=args.registry, ca_cert=args.ca)
    except (HostTreeError, OSError, jinja2.TemplateError) as exc:
        print('host-tree: %s' % exc, file=sys.stderr)
        return 1
    data = pack(files)
    old = None
    if os.path.exists(args.out):
        with open(args.out, 'rb') as handle:
            old = handle.read()
    facts['changed'] = old != data
    if facts['changed']:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        tmp = args.out + '.tmp'
        with open(tmp, 'wb') as handle:
            handle.write(data)
        os.replace(tmp, args.out)
    print(json.dumps(facts))
    return 0


if __name__ == '__main__':
    sys.exit(main())
