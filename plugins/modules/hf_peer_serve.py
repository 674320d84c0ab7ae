#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_peer_serve
short_description: Start the read-only rsync daemon of the peer fan-out, with this run's secret
version_added: 0.2.0
description:
  - 'Part of the C(peer) source of the C(inkling.fleet.hf_cache) role: in one step (one module run instead of four
    tasks, which the peer staging of a fleet waits for), creates the copy jobs'' runtime directory O(rundir), writes
    the daemon''s secrets file O(secrets_path) (C(USER:SECRET), mode 0600, root) and its configuration
    O(config_path) (mode 0600), and starts C(rsync --daemon) as the transient systemd unit O(unit).'
  - When the unit stops, for whatever reason, systemd removes the configuration, the secrets file and the runtime
    directory (C(ExecStopPost)). A unit that already runs is left as it is (the role ends what a killed run left
    first, with M(inkling.fleet.hf_peer_reset)).
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  unit:
    description: The transient unit's name, without C(.service).
    type: str
    required: true
  config:
    description: The daemon's configuration (the role renders C(templates/rsyncd.conf.j2)); it names O(secrets_path).
    type: str
    required: true
  config_path:
    description: Where the configuration is written.
    type: path
    required: true
  secrets_path:
    description: Where the secrets file is written.
    type: path
    required: true
  user:
    description: The daemon's C(auth users) user.
    type: str
    required: true
  secret:
    description: This run's secret (made on the controller).
    type: str
    required: true
  rundir:
    description: The copy jobs' runtime directory, which the daemon serves (module C(inkling-hf-run)).
    type: path
    required: true
notes:
  - Supports check mode (says it would start the daemon).
seealso:
  - module: inkling.fleet.hf_peer_copy
  - module: inkling.fleet.hf_peer_reset
'''

EXAMPLES = r'''
- name: Start this host's read-only rsync daemon
  inkling.fleet.hf_peer_serve:
    unit: inkling-hf-rsyncd
    config: "{{ lookup('ansible.builtin.template', 'rsyncd.conf.j2') }}"
    config_path: /run/inkling-hf-rsyncd.conf
    secrets_path: /run/inkling-hf-rsyncd.secrets
    user: inkling-fleet
    secret: "{{ peer_secret }}"
    rundir: /run/inkling-hf-cache
'''

RETURN = r'''
started:
  description: True when the daemon was started (false when its unit already ran).
  returned: always
  type: bool
'''

import os

from ansible.module_utils.basic import AnsibleModule


def write_private(path, text):
    """Write text to path, root-only (0600) from the first byte, replacing it atomically."""
    tmp = path + '.tmp'
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    os.rename(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type='str', required=True),
            config=dict(type='str', required=True),
            config_path=dict(type='path', required=True),
            secrets_path=dict(type='path', required=True),
            user=dict(type='str', required=True),
            secret=dict(type='str', required=True, no_log=True),
            rundir=dict(type='path', required=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    systemctl = module.get_bin_path('systemctl', required=True)
    rc, out, dummy = module.run_command([systemctl, 'is-active', p['unit'] + '.service'])
    if out.strip() in ('active', 'activating', 'reloading'):
        module.exit_json(changed=False, started=False, msg='%s runs already' % p['unit'])
    if module.check_mode:
        module.exit_json(changed=True, started=True)
    if not os.path.isdir(p['rundir']):
        os.makedirs(p['rundir'])
    os.chmod(p['rundir'], 0o755)
    write_private(p['secrets_path'], '%s:%s\n' % (p['user'], p['secret']))
    write_private(p['config_path'], p['config'].rstrip('\n') + '\n')
    argv = [module.get_bin_path('systemd-run', required=True), '--unit=%s' % p['unit'],
            '--description=inkling.fleet hub cache peer copy (stopped when staging ends)', '--collect',
            '--property=ExecStopPost=/bin/rm -rf %s %s %s' % (p['config_path'], p['secrets_path'], p['rundir']),
            '/usr/bin/rsync', '--daemon', '--no-detach', '--config=%s' % p['config_path']]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg='%s: cannot start the rsync daemon %s: %s' % (os.uname()[1], p['unit'], (err or out).strip()))
    module.exit_json(changed=True, started=True)


if __name__ == '__main__':
    main()
