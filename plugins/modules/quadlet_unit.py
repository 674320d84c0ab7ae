#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: quadlet_unit
short_description: Render, check and install the podman unit that serves a model
version_added: "0.1.0"
description:
  - Renders a quadlet C(.container) file (podman 4.4 and newer) or, where quadlet is missing,
    a plain systemd C(.service) unit running C(podman run), from a structured description of
    the container.
  - Checks the rendered unit B(before) the installed one is touched; any problem fails the
    module and leaves the running unit alone. Checks are the semantic lint of
    C(inkling.fleet)'s field failures (docs/field-failures.md; F8 C(/dev/shm) at TP>1,
    F9 read-only hub cache without C(HF_HUB_OFFLINE=1), F12 image not pinned by digest, F13 quadlet keys unknown to the
    installed podman, F14 start timeout and pull at start, F15 C(VLLM_ENGINE_READY_TIMEOUT_S)),
    then quadlet's own dry run (C(quadlet -dryrun)) with every C(unsupported key) line an
    error, then C(systemd-analyze verify) on the generated service.
  - Installs the file only when its content differs, keeping the previous content at
    O(backup_path) so a rollout can put it back. Returns a diff for C(--diff).
  - Restarts nothing. With O(daemon_reload), runs C(systemctl daemon-reload) after it changed the unit, so that
    systemd (and the quadlet generator) sees the new one; with O(check_loaded), then checks that systemd knows
    RV(unit_name) (C(systemctl cat)) and fails naming the quadlet generator when it does not (F13, a unit
    silently missing).
  - In check mode every check runs (they only write to a private temporary directory) and
    nothing is installed or reloaded; O(check_loaded) runs only when the unit would not change (systemd
    cannot know a unit that is not installed yet).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  name:
    description: Container and unit base name; the unit is C(<name>.service).
    type: str
    required: true
  unit_type:
    description:
      - C(quadlet) writes O(quadlet_dir)/C(<name>.container); C(systemd) writes
        O(systemd_dir)/C(<name>.service); C(auto) picks quadlet when podman is 4.4 or newer
        and the quadlet generator is installed.
      - When the type changes, the file of the other type is removed (and kept as backup).
    type: str
    choices: [auto, quadlet, systemd]
    default: auto
  image:
    description: Image reference, fully qualified and pinned, C(registry/name@sha256:<64 hex>).
    type: str
    required: true
  args:
    description: Arguments after the image's entrypoint (C(vllm serve)).
    type: list
    elements: str
    required: true
  env:
    description: Container environment. Values are written into the unit, so never put secrets here; use O(secrets).
    type: dict
    default: {}
  volumes:
    description: Bind mounts.
    type: list
    elements: dict
    default: []
    suboptions:
      source:
        description: Host path.
        type: str
        required: true
      target:
        description: Container path.
        type: str
        required: true
      options:
        description: Mount options, e.g. C(ro) or C(ro,z).
        type: str
        default: ''
  devices:
    description: Devices, e.g. CDI names C(nvidia.com/gpu=all).
    type: list
    elements: str
    default: []
  podman_args:
    description: Extra C(podman run) arguments (C(--ipc=host), C(--cgroups=disabled), ...).
    type: list
    elements: str
    default: []
  quadlet_options:
    description:
      - Raw C(Key=value) lines added to the quadlet C([Container]) section, for keys this module does not model
        (e.g. C(ShmSize=64g)). Checked like the rest (an unknown key fails before anything is installed).
      - Not allowed with a plain systemd unit.
    type: list
    elements: str
    default: []
  network:
    description: Container network (C(host) by default).
    type: str
    default: host
  label_disable:
    description: Disable SELinux separation for the container (C(label=disable)).
    type: bool
    default: false
  secrets:
    description:
      - Podman secrets handed to the container, by name (their data is never written in the unit).
      - A C(mount) secret is a file in the container and shows nowhere in C(podman inspect); an C(env) secret is an
        environment variable, which podman releases before 2026-02 show in C(podman inspect) unless its name and the
        variable's are the same. Prefer C(mount).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Podman secret name.
        type: str
        required: true
      target:
        description: For C(env), the environment variable's name; for C(mount), the file's absolute path in the container.
        type: str
        required: true
      type:
        description: How the container gets it.
        type: str
        choices: [env, mount]
        default: env
        version_added: "0.2.0"
      mode:
        description: For C(mount), the file's mode in the container (octal).
        type: str
        default: '0400'
        version_added: "0.2.0"
  description:
    description: Unit C(Description=).
    type: str
    default: Model server (vLLM) managed by inkling.fleet
  timeout_start_s:
    description: C(TimeoutStartSec) in seconds.
    type: int
    required: true
  timeout_stop_s:
    description: C(TimeoutStopSec) in seconds; at least O(stop_timeout_s).
    type: int
    required: true
  stop_timeout_s:
    description: Seconds podman waits after SIGTERM before SIGKILL (C(--stop-timeout)).
    type: int
    required: true
  restart_sec:
    description: C(RestartSec) in seconds.
    type: int
    default: 30
  start_limit_burst:
    description: C(StartLimitBurst); 0 leaves systemd's default.
    type: int
    default: 3
  start_limit_interval_s:
    description: C(StartLimitIntervalSec); must cover O(start_limit_burst) starts.
    type: int
    default: 7200
  comments:
    description: Comment lines written at the top of the unit (inputs worth reading later, never secrets).
    type: list
    elements: str
    default: []
  tensor_parallel_size:
    description: Tensor parallel size for the F8 check; default from the C(--tensor-parallel-size) argument.
    type: int
  model_params_b:
    description: Model size in billions of parameters for the F15 check.
    type: float
  min_timeout_start_s:
    description: Lowest acceptable C(TimeoutStartSec).
    type: int
  shm_floor_bytes:
    description: Smallest C(--shm-size) accepted instead of C(--ipc=host) at TP>1.
    type: int
    default: 17179869184
  hub_cache_target:
    description: Container path of the hub cache, for the F9 check.
    type: str
  quadlet_dir:
    description: Where quadlet files live.
    type: path
    default: /etc/containers/systemd
  systemd_dir:
    description: Where plain units live.
    type: path
    default: /etc/systemd/system
  backup_path:
    description:
      - File that receives the previous unit content each time the unit changes, for rollback.
        Its directory is created. Left alone when nothing changes.
    type: path
    required: true
  podman_path:
    description: The podman binary.
    type: path
    default: /usr/bin/podman
  quadlet_path:
    description: The quadlet generator; default the first of C(/usr/libexec/podman/quadlet), C(/usr/lib/podman/quadlet).
    type: path
  verify:
    description: Run C(quadlet -dryrun) and C(systemd-analyze verify); turn off only where those tools are missing.
    type: bool
    default: true
  mode:
    description: Mode of the installed unit file.
    type: raw
    default: '0644'
  daemon_reload:
    description: Run C(systemctl daemon-reload) when the unit changed (never in check mode).
    type: bool
    default: false
    version_added: "0.2.0"
  check_loaded:
    description:
      - Fail unless systemd knows RV(unit_name) once the unit is installed (and reloaded, with O(daemon_reload)),
        that is unless C(systemctl cat) finds it. Skipped in check mode when the unit would change.
      - The unit stays installed when this fails (it passed every check before); the message names the quadlet
        generator's log.
    type: bool
    default: false
    version_added: "0.2.0"
notes:
  - Why not C(containers.podman.podman_container) with C(state=quadlet)? In 1.18.0 it writes the file in
    place before any check (so a bad key replaces a good unit), has no plain-unit fallback for podman < 4.4,
    keeps no backup for rollback, returns a partial line diff, and cannot write C([Service]) or C([Unit])
    keys except as raw C(quadlet_options) lines. See C(docs/service.md).
  - Supports check mode and diff mode.
seealso:
  - name: podman-systemd.unit(5)
    description: Quadlet keys.
    link: https://docs.podman.io/en/latest/markdown/podman-systemd.unit.5.html
'''

EXAMPLES = r'''
- name: Install the vLLM unit
  inkling.fleet.quadlet_unit:
    name: inkling-vllm
    image: registry.example.com/vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    args: [--model, thinkingmachines/Inkling-NVFP4, --tensor-parallel-size, "8", --port, "8000"]
    env:
      HF_HUB_CACHE: /hub
      HF_HUB_OFFLINE: "1"
      VLLM_ENGINE_READY_TIMEOUT_S: "3600"
    volumes:
      - {source: /var/lib/inkling/huggingface/hub, target: /hub, options: ro}
    devices: [nvidia.com/gpu=all]
    podman_args: [--ipc=host]
    label_disable: true
    timeout_start_s: 4200
    timeout_stop_s: 150
    stop_timeout_s: 120
    model_params_b: 975
    backup_path: /var/lib/inkling/service/inkling-vllm.previous
    daemon_reload: true
    check_loaded: true
  register: unit
'''

RETURN = r'''
path:
  description: The installed unit file.
  returned: always
  type: str
  sample: /etc/containers/systemd/inkling-vllm.container
unit_type:
  description: C(quadlet) or C(systemd).
  returned: always
  type: str
unit_name:
  description: The systemd unit to start.
  returned: always
  type: str
  sample: inkling-vllm.service
secret_args:
  description: The unit's secrets as C(podman run) options, by name only (for a trial container that must see them too).
  returned: always
  type: list
  elements: str
  sample: ['--secret=inkling-vllm-api-key,type=mount,target=/run/secrets/inkling-vllm-api-key.yaml,mode=0400']
  version_added: "0.2.0"
content:
  description: The rendered unit file.
  returned: always
  type: str
generated:
  description: The service quadlet generates from it (quadlet only, when O(verify) is true).
  returned: when quadlet ran
  type: str
backup:
  description: Path holding the previous content when this run replaced the unit, else null.
  returned: always
  type: str
reloaded:
  description: Whether this run ran C(systemctl daemon-reload).
  returned: always
  type: bool
  version_added: "0.2.0"
podman_version:
  description: The installed podman version.
  returned: always
  type: str
  sample: 5.4.2
errors:
  description: Problems found (the module fails when there are any).
  returned: on failure
  type: list
  elements: str
'''

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.inkling.fleet.plugins.module_utils import unit_lint

QUADLET_CANDIDATES = ('/usr/libexec/podman/quadlet', '/usr/lib/podman/quadlet')


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (IOError, OSError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            unit_type=dict(type='str', default='auto', choices=['auto', 'quadlet', 'systemd']),
            image=dict(type='str', required=True),
            args=dict(type='list', elements='str', required=True),
            env=dict(type='dict', default={}),
            volumes=dict(type='list', elements='dict', default=[], options=dict(
                source=dict(type='str', required=True),
                target=dict(type='str', required=True),
                options=dict(type='str', default=''),
            )),
            devices=dict(type='list', elements='str', default=[]),
            podman_args=dict(type='list', elements='str', default=[]),
            quadlet_options=dict(type='list', elements='str', default=[]),
            network=dict(type='str', default='host'),
            label_disable=dict(type='bool', default=False),
            secrets=dict(type='list', elements='dict', default=[], no_log=False, options=dict(
                name=dict(type='str', required=True),
                target=dict(type='str', required=True),
                type=dict(type='str', default='env', choices=['env', 'mount']),
                mode=dict(type='str', default='0400'),
            )),
            description=dict(type='str', default='Model server (vLLM) managed by inkling.fleet'),
            timeout_start_s=dict(type='int', required=True),
            timeout_stop_s=dict(type='int', required=True),
            stop_timeout_s=dict(type='int', required=True),
            restart_sec=dict(type='int', default=30),
            start_limit_burst=dict(type='int', default=3),
            start_limit_interval_s=dict(type='int', default=7200),
            comments=dict(type='list', elements='str', default=[]),
            tensor_parallel_size=dict(type='int'),
            model_params_b=dict(type='float'),
            min_timeout_start_s=dict(type='int'),
            shm_floor_bytes=dict(type='int', default=unit_lint.DEFAULT_SHM_FLOOR_BYTES),
            hub_cache_target=dict(type='str'),
            quadlet_dir=dict(type='path', default='/etc/containers/systemd'),
            systemd_dir=dict(type='path', default='/etc/systemd/system'),
            backup_path=dict(type='path', required=True),
            podman_path=dict(type='path', default='/usr/bin/podman'),
            quadlet_path=dict(type='path'),
            verify=dict(type='bool', default=True),
            mode=dict(type='raw', default='0644'),
            daemon_reload=dict(type='bool', default=False),
            check_loaded=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    name = p['name']
    result = dict(changed=False, unit_name=name + '.service', backup=None, reloaded=False,
                  secret_args=['--secret=%s' % unit_lint.secret_arg(sec) for sec in p['secrets']])

    # What podman is installed, and does it have quadlet?
    rc, out, err = module.run_command([p['podman_path'], '--version'])
    if rc != 0:
        module.fail_json(msg='%s --version failed (rc=%d): %s; install podman first' % (p['podman_path'], rc, err.strip()),
                         **result)
    version = unit_lint.parse_version(out)
    result['podman_version'] = unit_lint.version_str(version)
    quadlet_path = p['quadlet_path'] or next((c for c in QUADLET_CANDIDATES if os.access(c, os.X_OK)), None)
    has_quadlet = bool(quadlet_path and os.access(quadlet_path, os.X_OK)) and version is not None \
        and version[:2] >= unit_lint.QUADLET_MIN_VERSION
    unit_type = p['unit_type']
    if unit_type == 'auto':
        unit_type = 'quadlet' if has_quadlet else 'systemd'
    elif unit_type == 'quadlet' and not has_quadlet:
        module.fail_json(msg='unit_type=quadlet but podman %s at %s has no quadlet generator (needs podman >= 4.4 '
                             'and %s); use unit_type=auto or systemd'
                             % (result['podman_version'], p['podman_path'], ' or '.join(QUADLET_CANDIDATES)), **result)
    result['unit_type'] = unit_type

    spec = dict((k, p[k]) for k in ('name', 'description', 'image', 'args', 'env', 'volumes', 'devices', 'podman_args',
                                    'network', 'label_disable', 'secrets', 'timeout_start_s', 'timeout_stop_s',
                                    'stop_timeout_s', 'restart_sec', 'start_limit_burst', 'start_limit_interval_s',
                                    'comments', 'podman_path', 'quadlet_options'))
    errors = []
    if p['timeout_stop_s'] <= p['stop_timeout_s']:
        errors.append('timeout_stop_s (%d) must exceed stop_timeout_s (%d): systemd would kill podman before it '
                      'finishes stopping the container' % (p['timeout_stop_s'], p['stop_timeout_s']))
    try:
        if unit_type == 'quadlet':
            content = unit_lint.render_quadlet(spec, podman_version=version)
        else:
            content = unit_lint.render_systemd(spec)
    except unit_lint.UnitLintError as exc:
        module.fail_json(msg='cannot render the unit for %s: %s' % (name, exc), errors=exc.errors, **result)
    result['content'] = content
    errors += unit_lint.lint_unit(content, kind=unit_type, podman_version=version,
                                  tensor_parallel_size=p['tensor_parallel_size'], model_params_b=p['model_params_b'],
                                  min_timeout_start_s=p['min_timeout_start_s'], shm_floor_bytes=p['shm_floor_bytes'],
                                  hub_cache_target=p['hub_cache_target'])

    # The tools' own checks, in a private directory (runs in check mode too).
    if p['verify'] and not errors:
        tmp = tempfile.mkdtemp(prefix='inkling-unit-')
        try:
            if unit_type == 'quadlet':
                qdir = os.path.join(tmp, 'quadlet')
                os.mkdir(qdir)
                with open(os.path.join(qdir, name + '.container'), 'w') as fh:
                    fh.write(content)
                rc, out, err = module.run_command([quadlet_path, '-dryrun'],
                                                  environ_update={'QUADLET_UNIT_DIRS': qdir})
                generated, dry_errors = unit_lint.parse_quadlet_dryrun(rc, out, err, name + '.container')
                errors += ['quadlet on podman %s rejected %s.container: %s' % (result['podman_version'], name, e)
                           for e in dry_errors]
                result['generated'] = generated
                service_text = generated
            else:
                service_text = content
            if service_text is not None and not errors:
                vdir = os.path.join(tmp, 'verify')
                os.mkdir(vdir)
                unit_path = os.path.join(vdir, name + '.service')
                with open(unit_path, 'w') as fh:
                    fh.write(service_text)
                analyze = module.get_bin_path('systemd-analyze')
                if analyze:
                    rc, out, err = module.run_command([analyze, 'verify', unit_path])
                    errors += ['systemd-analyze verify: %s' % e
                               for e in unit_lint.parse_systemd_verify(rc, out, err, unit_path)]
                else:
                    module.warn('systemd-analyze not found; the generated unit was not verified')
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    if errors:
        module.fail_json(msg='unit %s for %s not installed (the running unit is untouched): %s'
                             % (unit_type, name, '; '.join(errors)), errors=errors, **result)

    # Install, keeping the previous content for rollback.
    path = os.path.join(p['quadlet_dir'] if unit_type == 'quadlet' else p['systemd_dir'],
                        name + ('.container' if unit_type == 'quadlet' else '.service'))
    other = os.path.join(p['systemd_dir'] if unit_type == 'quadlet' else p['quadlet_dir'],
                         name + ('.service' if unit_type == 'quadlet' else '.container'))
    result['path'] = path
    before = _read(path)
    other_before = _read(other)
    previous = before if before is not None else other_before
    changed = before != content or other_before is not None
    result['changed'] = changed
    if module._diff:
        result['diff'] = dict(before=previous or '', after=content,
                              before_header=path if before is not None else (other if other_before else path),
                              after_header=path)
    if changed and not module.check_mode:
        try:
            if previous is not None:
                bdir = os.path.dirname(p['backup_path'])
                if bdir and not os.path.isdir(bdir):
                    os.makedirs(bdir, 0o750)
                fd, tmpb = tempfile.mkstemp(dir=bdir or None)
                with os.fdopen(fd, 'w') as fh:
                    fh.write(previous)
                module.atomic_move(tmpb, p['backup_path'])
                result['backup'] = p['backup_path']
            pdir = os.path.dirname(path)
            if not os.path.isdir(pdir):
                os.makedirs(pdir, 0o755)
            fd, tmpf = tempfile.mkstemp(dir=pdir, prefix='.' + name + '.')
            with os.fdopen(fd, 'w') as fh:
                fh.write(content)
            module.atomic_move(tmpf, path)
            module.set_mode_if_different(path, p['mode'], False)
            if other_before is not None:
                os.unlink(other)
        except (IOError, OSError) as exc:
            module.fail_json(msg='cannot install %s: %s' % (path, to_native(exc)), **result)
    elif not module.check_mode and os.path.exists(path):
        result['changed'] = module.set_mode_if_different(path, p['mode'], False)
    systemd(module, p, result)
    module.exit_json(**result)


def systemd(module, p, result):
    """daemon-reload after a change, then the check that systemd knows the unit (options daemon_reload and
    check_loaded). In check mode nothing is reloaded, and a unit that would change is not asked about (it is
    not installed)."""
    if module.check_mode and (result['changed'] or not p['check_loaded']):
        return
    if not (p['check_loaded'] or (p['daemon_reload'] and result['changed'])):
        return
    systemctl = module.get_bin_path('systemctl', required=True)
    if p['daemon_reload'] and result['changed']:
        rc, out, err = module.run_command([systemctl, 'daemon-reload'])
        if rc != 0:
            module.fail_json(msg='%s installed but systemctl daemon-reload failed (rc=%d): %s'
                                 % (result['path'], rc, (err or out).strip()), **result)
        result['reloaded'] = True
    if p['check_loaded']:
        rc, dummy, err = module.run_command([systemctl, 'cat', result['unit_name']])
        if rc != 0:
            module.fail_json(msg='%s installed but systemd has no %s after daemon-reload (%s). Check the quadlet '
                                 'generator (journalctl -b | grep quadlet) for podman %s (F13).'
                                 % (result['path'], result['unit_name'], (err or '').strip(),
                                    result['podman_version']), **result)


if __name__ == '__main__':
    main()
