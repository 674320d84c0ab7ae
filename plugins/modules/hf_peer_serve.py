#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_peer_serve
short_description: Start the read-only rsync daemon and relay of the peer fan-out, with this run's secret
version_added: "0.2.0"
description:
  - 'Part of the C(peer) source of the C(inkling.fleet.hf_cache) role: in one step (one module run instead of four
    tasks, which the peer staging of a fleet waits for), creates the copy jobs'' runtime directory O(rundir), writes
    the daemon''s secrets file O(secrets_path) (C(USER:SECRET), mode 0600, root) and its configuration
    O(config_path) (mode 0600), and starts C(rsync --daemon) as the transient systemd unit O(unit) (with
    O(relay_port), the relay as the unit''s process, running the daemon beside it).'
  - When the unit stops, for whatever reason, systemd removes the configuration, the secrets file and the runtime
    directory (C(ExecStopPost)).
  - 'With O(pid_file), it first ends what a killed run left (its copy job, found through O(pid_file), the unit
    O(unit), the paths of O(remove)), as M(inkling.fleet.hf_peer_reset) does, in the same task: the peer staging of
    a fleet waits for every task on every host. Without O(pid_file), a unit that already runs is left as it is.'
  - Fails before anything changes when O(address) is given and empty (the host has no address on the fleet
    network), naming the remedy.
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
  address:
    description: The address the daemon listens on (the one O(config) names); checked to be non-empty.
    type: str
  runtime_max_s:
    description:
      - Seconds after which systemd stops the unit whatever happens (C(RuntimeMaxSec)), so that the daemon and the
        relay of a run killed while staging stop serving on their own; 0 leaves the unit unbounded. The role sets
        its download timeout plus an hour.
    type: int
    default: 0
  pid_file:
    description: The copy job's pid file of M(inkling.fleet.hf_peer_reset); when given, what a killed run left is
      ended first.
    type: path
  remove:
    description: With O(pid_file), files and directories a killed run left (removed after its unit stopped).
    type: list
    elements: path
    default: []
  relay_port:
    description:
      - With a port, the unit also runs the relay (module_utils C(hf_peer_relay), written to O(rundir) as
        C(relay.py) with its configuration C(relay.json), mode 0600) beside the rsync daemon, on O(address) and this
        port; the unit ends when either ends. V(0) runs the rsync daemon alone.
      - The relay streams the receivers of M(inkling.fleet.hf_peer_copy) a blob of O(relay_repo_dir) while this host
        still receives it, to the addresses of O(relay_allow) only, and only to a client that proves it holds
        O(secret) (HMAC-SHA256 of a random challenge; the secret never crosses the network).
    type: int
    default: 0
  relay_repo_dir:
    description:
      - The repository's folder in the hub cache (C(CACHE/models--ORG--NAME)); required with O(relay_port).
      - The relay serves from inside the hub cache folder above it only (chroot; the repository's own folder does not
        exist yet on a receiver before its first blob); its blobs and its inbox of arriving files are there.
    type: path
  relay_allow:
    description: The fleet's addresses the relay answers (the daemon's C(hosts allow)).
    type: list
    elements: str
    default: []
  relay_owner:
    description:
      - The user the relay serves as, once its port is bound and the secret read (the role passes its dedicated
        unprivileged serving user, C(hf_cache_peer_serve_user)).
      - Run as root, the relay first confines itself to the hub cache that holds O(relay_repo_dir) (chroot), so
        that it reaches nothing else of the host.
    type: str
  relay_group:
    description: The group the relay serves as.
    type: str
  create_owner:
    description:
      - Create O(relay_owner) as an unprivileged system user (no home, shell C(/usr/sbin/nologin)) when it does not
        exist, and O(relay_group) as a system group when it is O(relay_owner)'s own name and does not exist, with
        C(groupadd) and C(useradd), in this same module run (the peer staging of a fleet waits for every task on
        every host). The rsync daemon's configuration names the same user.
      - An existing user or group is left as it is. Refuses C(root) or uid 0.
    type: bool
    default: false
  relay_hold_s:
    description: Seconds the relay waits for a blob a receiver asks for before it answers that it holds none.
    type: float
    default: 2
  relay_stall_s:
    description: Seconds the relay waits for the blob it streams to grow (this host's own transfer of it stalled)
      before it ends the stream; the receiver then waits as for a blob its source lacks. Keep it below the
      receivers' stall bound (their O(inkling.fleet.hf_peer_copy#module:switch_after_s) + 5 s).
    type: int
    default: 15
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
    address: "{{ ansible_default_ipv4.address }}"
    pid_file: /run/inkling-hf-peer-copy.pid
'''

RETURN = r'''
started:
  description: True when the daemon was started (false when its unit already ran).
  returned: always
  type: bool
reset:
  description: What was ended of a killed run (C(killed), C(stopped), C(removed)), as M(inkling.fleet.hf_peer_reset)
    returns it.
  returned: when pid_file is given
  type: dict
created:
  description: The user and group created (C(user NAME), C(group NAME)), or that would be in check mode.
  returned: when create_owner is true
  type: list
  elements: str
'''

import grp
import json
import os
import pwd
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import daemon_server
from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_daemon
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_fetch
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_relay


def write_private(path, text):
    """Write text to path, root-only (0600) from the first byte, replacing it atomically."""
    tmp = path + '.tmp'
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(text)
    os.rename(tmp, path)


def sandbox(rundir):
    """What the unit may do (docs/security.md): the daemon and the relay start as root only to bind, read the
    secret, chroot and switch to the serving user (a dedicated unprivileged one); the file system is read-only but for the runtime directory
    (the daemon's lock file), and no privilege can be gained back."""
    return ['NoNewPrivileges=yes', 'ProtectSystem=strict', 'ProtectHome=yes', 'PrivateTmp=yes',
            'ReadWritePaths=%s' % rundir, 'CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_SYS_CHROOT',
            'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX']


def ensure_owner(module, user, group):
    """Create the unprivileged system user (and its own group) the daemon and the relay serve as, when missing.
    Returns the names created (or that would be, in check mode)."""
    if not user or user == 'root':
        module.fail_json(msg='%s: the peer daemons must not serve as %r; set hf_cache_peer_serve_user to an '
                             'unprivileged user' % (os.uname()[1], user))
    created = []
    try:
        if pwd.getpwnam(user).pw_uid == 0:
            module.fail_json(msg='%s: user %s has uid 0; the peer daemons must serve as an unprivileged user'
                                 % (os.uname()[1], user))
        return created
    except KeyError:
        pass
    group = group or user
    commands = []
    try:
        grp.getgrnam(group)
    except KeyError:
        if group != user:
            module.fail_json(msg='%s: group %s does not exist (hf_cache_group); create it or set hf_cache_group to '
                                 'one that does' % (os.uname()[1], group))
        commands.append([module.get_bin_path('groupadd', required=True), '--system', group])
        created.append('group ' + group)
    commands.append([module.get_bin_path('useradd', required=True), '--system', '--no-create-home',
                     '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', '--gid', group,
                     '--comment', 'inkling.fleet hub cache peer serving', user])
    created.append('user ' + user)
    if module.check_mode:
        return created
    for argv in commands:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg='%s: cannot create %s: %s' % (os.uname()[1], argv[-1], (err or out).strip()))
    return created


def relay_command(p, ids):
    """Write the relay's script and configuration to the run directory; the command that runs it."""
    uid, gid = ids
    cfg = {'address': p['address'], 'port': p['relay_port'], 'allow': sorted(set(p['relay_allow'])),
           'secrets_file': p['secrets_path'], 'user': p['user'],
           'blobs_dir': os.path.join(p['relay_repo_dir'], 'blobs'), 'inbox': hf_peer_fetch.inbox_dir(p['relay_repo_dir']),
           'hold_s': p['relay_hold_s'], 'stall_s': p['relay_stall_s'], 'uid': uid, 'gid': gid,
           'root': os.path.dirname(p['relay_repo_dir'].rstrip('/'))}
    script = os.path.join(p['rundir'], 'relay.py')
    config = os.path.join(p['rundir'], 'relay.json')
    write_private(script, daemon_server.script_source(hf_peer_relay))
    write_private(config, json.dumps(cfg, indent=1, sort_keys=True))
    return [sys.executable or '/usr/bin/python3', script, config, '--']


def main():
    module = AnsibleModule(argument_spec=hf_peer_daemon.SERVE_ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p['address'] is not None and not p['address'].strip():
        module.fail_json(msg='%s: no address for the peer copy (hf_cache_peer_address is empty: the host has no IPv4 '
                             'default route). Remedy: set hf_cache_peer_address to this host\'s address on the fleet '
                             'network.' % os.uname()[1])
    if p['relay_port'] and not (p['relay_repo_dir'] and p['address']):
        module.fail_json(msg='%s: relay_port needs relay_repo_dir and address' % os.uname()[1])
    extra = {}
    if p['create_owner']:
        extra['created'] = ensure_owner(module, p['relay_owner'], p['relay_group'])
    ids = (None, None)
    if p['relay_port'] and not (module.check_mode and extra.get('created')):
        try:
            ids = hc.resolve_owner(p['relay_owner'], p['relay_group'])
        except hc.HfCacheError as exc:
            module.fail_json(msg='%s: the relay cannot serve as %s:%s: %s' % (os.uname()[1], p['relay_owner'],
                                                                              p['relay_group'], exc))
    if p['pid_file']:
        extra['reset'] = hf_peer_daemon.reset(module, p['unit'], p['pid_file'], p['remove'])
    systemctl = module.get_bin_path('systemctl', required=True)
    rc, out, dummy = module.run_command([systemctl, 'is-active', p['unit'] + '.service'])
    ended = extra.get('reset') or {}
    if out.strip() in ('active', 'activating', 'reloading') and not (module.check_mode and ended.get('stopped')):
        module.exit_json(changed=bool(ended.get('changed') or extra.get('created')), started=False, msg='%s runs already' % p['unit'], **extra)
    if module.check_mode:
        module.exit_json(changed=True, started=True, **extra)
    if not os.path.isdir(p['rundir']):
        os.makedirs(p['rundir'])
    os.chmod(p['rundir'], 0o755)
    write_private(p['secrets_path'], '%s:%s\n' % (p['user'], p['secret']))
    write_private(p['config_path'], p['config'].rstrip('\n') + '\n')
    argv = [module.get_bin_path('systemd-run', required=True), '--unit=%s' % p['unit'],
            '--description=inkling.fleet hub cache peer copy (stopped when staging ends)', '--collect',
            '--property=ExecStopPost=+/bin/rm -rf %s %s %s' % (p['config_path'], p['secrets_path'], p['rundir'])]
    argv += ['--property=%s' % prop for prop in sandbox(p['rundir'])]
    if p['runtime_max_s'] > 0:
        argv.append('--property=RuntimeMaxSec=%d' % p['runtime_max_s'])
    argv += ['/usr/bin/rsync', '--daemon', '--no-detach', '--config=%s' % p['config_path']]
    if p['relay_port']:
        argv[-4:-4] = relay_command(p, ids)
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg='%s: cannot start the rsync daemon %s: %s' % (os.uname()[1], p['unit'], (err or out).strip()))
    if ended.get('msg'):
        extra['msg'] = ended['msg']
    module.exit_json(changed=True, started=True, **extra)


if __name__ == '__main__':
    main()
