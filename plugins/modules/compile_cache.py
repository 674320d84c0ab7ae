#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: compile_cache
short_description: Key, list, seed and prune the compile and autotune cache sets of the vLLM unit
version_added: "0.2.0"
description:
  - A cache set is the directory C(<cache_root>/<variant>/<digest hex>) the service role mounts into the unit,
    one subdirectory per cache (C(vllm), C(triton), C(torchinductor), ...). Its cache key (variant, image digest,
    GPU model and count, driver version, tensor parallel size; see docs/warm-restarts.md) is kept in
    C(inkling-cache-key.json) inside it.
  - O(state=present) creates the set and its subdirectories (and O(cache_root) and the variant's directory above
    it), owned by root, mode 0750, in one call; the service role uses it.
  - O(state=claimed) writes this host's key into its set. A set that carries another key (the driver was
    upgraded in place, the GPUs changed) is emptied first, so the host starts cold rather than on kernels built
    for something else.
  - O(state=listed) lists the set of a source host (path, size and SHA-256 of every regular file), after
    checking it carries O(key).
  - O(state=served) lists the set as O(state=listed) does, then serves it read-only over HTTP on O(address) and
    O(port), as the transient systemd unit O(unit) that stops after O(serve_s) seconds (a unit of that name left by
    an earlier run is stopped first), and waits until the port answers. The server (module_utils
    C(cache_seed_server), written root-only to O(rundir)) answers only the addresses of O(allow), only a client that
    sends O(token), and only the paths of the listing, each opened without following a link and only while its size
    is the listed one; no directory listing. It runs as C(nobody) with only C(CAP_DAC_READ_SEARCH) on a read-only
    file system (docs/security.md).
  - O(state=seeded) first claims the set as O(state=claimed) does; then, given O(source_url), copies a source's
    set into it when it is empty - every file of O(manifest) is fetched over HTTP from O(source_url) into a staging directory beside the set, its size
    and SHA-256 checked against the manifest (which came through the controller, not from the source's
    server), and only when every file is right are they all moved into place. Any failure leaves the set as it
    was, empty (a cold start), and is reported, not raised, so the restart goes on cold. A set that already holds
    files is left alone.
  - O(state=pruned) removes every set under O(cache_root) that is not in O(keep) (the running and the rollback
    target sets). With nothing in O(keep) nothing is removed.
  - The set is mounted read-write into the container, which runs model code, so this module (run as root) never
    follows a link inside it - every path there is reached through directory descriptors opened with
    C(O_NOFOLLOW). A cache subdirectory that is a link fails the task with its path; links inside a
    subdirectory are removed as themselves when a set is emptied, and left out of a listing. Seeding stages the
    files beside the set, in the variant's directory that the container cannot reach, reads at most each file's
    listed size, and renames the files into the set (docs/security.md).
  - Needs only the Python standard library.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  state:
    description: What to do (see the description).
    type: str
    choices: [present, claimed, listed, served, seeded, pruned]
    required: true
  cache_dir:
    description: This host's cache set (C(service_cache_set.dir)). Required unless O(state=pruned).
    type: path
  subdirs:
    description: The cache subdirectories of the set (C(service_cache_set.subdirs)).
    type: list
    elements: str
    default: []
  key:
    description: The cache key (filter C(inkling.fleet.cache_key)); required for claimed, listed and seeded.
    type: dict
  manifest:
    description: For O(state=seeded), the source's files as RV(files) of O(state=listed) returned them.
    type: list
    elements: dict
    default: []
  source_url:
    description: For O(state=seeded), the base URL under which the source serves its set.
    type: str
  address:
    description: For O(state=served), the address to serve on (reachable from the fleet only).
    type: str
  port:
    description: For O(state=served), the TCP port.
    type: int
    default: 8874
  serve_s:
    description: For O(state=served), seconds after which the server stops (systemd C(RuntimeMaxSec)).
    type: int
    default: 7200
  unit:
    description: For O(state=served), the name of the transient systemd unit.
    type: str
    default: inkling-cache-seed.service
  token:
    description:
      - For O(state=served), the token a client must send (an C(Authorization) header C(Bearer TOKEN)); for
        O(state=seeded), the source's token, sent with every request. Made per run on the controller; never logged.
    type: str
  allow:
    description:
      - For O(state=served), the fleet's hosts that may fetch (names or addresses, resolved on this host); every
        other address gets its connection closed. Names that do not resolve here are reported in RV(reason).
    type: list
    elements: str
    default: []
  rundir:
    description: For O(state=served), the root-only directory for the server's script and configuration.
    type: path
    default: /run/inkling-cache-seed
  timeout_s:
    description: For O(state=seeded), the timeout of each HTTP request, in seconds.
    type: float
    default: 30
  cache_root:
    description: For O(state=pruned), the directory holding C(<variant>/<digest hex>) sets; for O(state=present),
      the directory above the variant's directory of O(cache_dir), also created.
    type: path
  keep:
    description: For O(state=pruned), the sets to keep, each C([variant, digest hex]).
    type: list
    elements: list
    default: []
extends_documentation_fragment:
  - inkling.fleet.attributes.check_full_diff_none
seealso:
  - name: docs/warm-restarts.md
    description: Which caches are shared, the key, how to turn seeding off.
    link: https://github.com/inkling-fleet/inkling.fleet/blob/main/docs/warm-restarts.md
'''

EXAMPLES = r'''
- name: Write this host's key into its cache set
  inkling.fleet.compile_cache:
    state: claimed
    cache_dir: "{{ service_cache_set.dir }}"
    subdirs: "{{ service_cache_set.subdirs }}"
    key: "{{ rollout_deployment | inkling.fleet.cache_key(preflight_gpu) }}"

- name: Copy the canary's caches (fleet-only, every file checked against the canary's list)
  inkling.fleet.compile_cache:
    state: seeded
    cache_dir: "{{ service_cache_set.dir }}"
    subdirs: "{{ service_cache_set.subdirs }}"
    key: "{{ my_key }}"
    # what the canary's task with state=served registered as `served`, and the token it was given
    manifest: "{{ hostvars[source].served.files }}"
    source_url: "{{ hostvars[source].served.url }}"
    token: "{{ seed_token }}"

- name: Serve the canary's caches read-only to the fleet for two hours
  inkling.fleet.compile_cache:
    state: served
    cache_dir: "{{ service_cache_set.dir }}"
    subdirs: "{{ service_cache_set.subdirs }}"
    key: "{{ my_key }}"
    address: 10.0.0.11
    port: 8874
    serve_s: 7200
    token: "{{ seed_token }}"
    allow: [10.0.0.12, 10.0.0.13]
  register: served

- name: Create a cache set and its subdirectories
  inkling.fleet.compile_cache:
    state: present
    cache_root: /var/lib/inkling/cache
    cache_dir: /var/lib/inkling/cache/sm90-patched/{{ digest_hex }}
    subdirs: [triton, vllm]

- name: Remove the sets of images neither running nor the rollback target
  inkling.fleet.compile_cache:
    state: pruned
    cache_root: /var/lib/inkling/cache
    keep: [[sm90-patched, "{{ new_digest_hex }}"], [sm90-patched, "{{ old_digest_hex }}"]]
'''

RETURN = r'''
reason:
  description: What was done or why not, in words.
  returned: always
  type: str
  sample: "seeded 412 files (1.9 GB) from http://10.0.0.11:8874 in 6.2 s"
key_before:
  description: For O(state=claimed), the key the set carried before (null when none).
  returned: when state is claimed
  type: dict
url:
  description: For O(state=served), the base URL of the server.
  returned: when state is served
  type: str
  sample: http://10.0.0.11:8874
allow:
  description: For O(state=served), the addresses the server answers (O(allow) resolved on this host).
  returned: when state is served
  type: list
  elements: str
files:
  description: For O(state=listed) and O(state=served), every regular file of the set, C(path) (relative to the set), C(size), C(sha256).
  returned: when state is listed or served
  type: list
  elements: dict
left_out:
  description: For O(state=listed) and O(state=served), links and special files not listed.
  returned: when state is listed or served
  type: list
  elements: str
bytes:
  description: Bytes listed (listed) or copied (seeded).
  returned: when state is listed, served or seeded
  type: int
seeded:
  description: For O(state=seeded), whether the set now holds the source's files.
  returned: when state is seeded
  type: bool
seconds:
  description: For O(state=seeded), seconds the copy and the checks took.
  returned: when state is seeded
  type: float
created:
  description: For O(state=present), the directories created.
  returned: when state is present
  type: list
  elements: str
fixed:
  description: For O(state=present), the directories whose owner or mode was set.
  returned: when state is present
  type: list
  elements: str
removed:
  description: For O(state=pruned), the sets removed, each C([variant, digest hex]).
  returned: when state is pruned
  type: list
  elements: list
kept:
  description: For O(state=pruned), the sets present and kept.
  returned: when state is pruned
  type: list
  elements: list
'''

import hashlib
import json
import os
import socket
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.parse import quote
from ansible.module_utils.urls import open_url
from ansible_collections.inkling.fleet.plugins.module_utils import cache_seed_server
from ansible_collections.inkling.fleet.plugins.module_utils import daemon_server
from ansible_collections.inkling.fleet.plugins.module_utils import nofollow
from ansible_collections.inkling.fleet.plugins.module_utils import warm_cache as wc

STAGING = '.inkling-seeding'  # inside the set: where code before 0.2.0 staged; removed when found


def staging_name(cache_dir):
    """The staging directory of a seeding: beside the set, in the variant's directory, which the
    container cannot reach (the set itself is mounted into it read-write)."""
    return '%s-%s' % (STAGING, os.path.basename(os.path.normpath(cache_dir)))


def read_key(cache_dir):
    try:
        with nofollow.opened_dir(cache_dir) as top:
            data = nofollow.read_small(wc.KEY_FILE, top)
        return json.loads(data.decode('utf-8')) if data is not None else None
    except (IOError, OSError, ValueError):
        return None


def write_key(cache_dir, key):
    text = json.dumps(dict((k, key[k]) for k in wc.KEY_FIELDS + ('id',)), sort_keys=True, indent=1) + '\n'
    with nofollow.opened_dir(cache_dir) as top:
        nofollow.write_atomic(wc.KEY_FILE, top, text.encode('utf-8'), 0o640)


def same_key(a, b):
    return bool(a) and bool(b) and all(a.get(f) == b.get(f) for f in wc.KEY_FIELDS + ('id',))


def empty_subdirs(cache_dir, subdirs):
    """Empty each cache subdirectory. Links inside are removed, never followed; a subdirectory
    that is a link is refused (nofollow.LinkRefused)."""
    with nofollow.opened_dir(cache_dir) as top:
        for sub in subdirs:
            if not nofollow.lexists(sub, top):
                continue
            with nofollow.opened_dir(sub, dir_fd=top, shown=os.path.join(cache_dir, sub)) as fd:
                nofollow.empty_dir(fd)


def present(module, p):
    """The set, its subdirectories and the directories above it up to cache_root: root-owned, 0750."""
    try:
        created, fixed = wc.make_set(p['cache_dir'], p['subdirs'], p['cache_root'], module.check_mode)
    except wc.NotUnderRoot as exc:
        module.fail_json(msg='compile_cache: %s' % exc)
    module.exit_json(changed=bool(created or fixed), created=created, fixed=fixed,
                     reason='created %d, owner or mode set on %d director(ies)' % (len(created), len(fixed)))


def claim(module, p):
    """Write this host's key into its set, emptying a set of another key. (changed, reason, key before)."""
    before = read_key(p['cache_dir'])
    if same_key(before, p['key']):
        return False, 'the set carries this key', before
    cold = wc.set_is_empty(p['cache_dir'], p['subdirs'])
    if before is None:
        reason = 'key written (the set was %s)' % ('empty' if cold else 'filled by this host before keys were kept')
    else:
        reason = 'the set carried another key (%s); emptied: this host starts cold' % ', '.join(
            '%s %s -> %s' % (f, before.get(f), p['key'][f]) for f in wc.KEY_FIELDS if before.get(f) != p['key'][f])
    if not module.check_mode:
        if before is not None:
            empty_subdirs(p['cache_dir'], p['subdirs'])
        write_key(p['cache_dir'], p['key'])
    return True, reason, before


def claimed(module, p):
    changed, reason, before = claim(module, p)
    module.exit_json(changed=changed, key_before=before, reason=reason)


def list_set(module, p):
    have = read_key(p['cache_dir'])
    if not same_key(have, p['key']):
        module.fail_json(msg='compile_cache: %s carries key %s, expected %s: it is not the set of this deployment. '
                         'Remedy: none needed, the hosts start cold; report this if it repeats.'
                         % (p['cache_dir'], (have or {}).get('id'), p['key'].get('id')))
    files, left_out = wc.build_manifest(p['cache_dir'], p['subdirs'])
    return files, left_out, sum(f['size'] for f in files)


def listed(module, p):
    files, left_out, total = list_set(module, p)
    module.exit_json(changed=False, files=files, left_out=left_out, bytes=total,
                     reason='%d files, %d bytes' % (len(files), total))


def resolve_allow(names):
    """The addresses of the fleet's hosts (names or addresses, resolved on this host): (addresses, unresolved)."""
    found, unresolved = set(), []
    for name in names:
        try:
            found.update(plain(info[4][0]) for info in socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM))
        except (socket.gaierror, UnicodeError):
            unresolved.append(name)
    return sorted(found), unresolved


def plain(addr):
    return addr.split('%', 1)[0]


# What the seed server's unit may do (docs/security.md): run as nobody, read the root-only set
# (CAP_DAC_READ_SEARCH, nothing else), write nothing.
SANDBOX = ['User=nobody', 'AmbientCapabilities=CAP_DAC_READ_SEARCH', 'CapabilityBoundingSet=CAP_DAC_READ_SEARCH',
           'NoNewPrivileges=yes', 'ProtectSystem=strict', 'ProtectHome=yes', 'PrivateTmp=yes',
           'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX']


def served(module, p):
    files, left_out, total = list_set(module, p)
    host = p['address']
    url = 'http://%s:%d' % ('[%s]' % host if ':' in host else host, p['port'])
    allow, unresolved = resolve_allow(p['allow'])
    if module.check_mode:
        module.exit_json(changed=True, files=files, left_out=left_out, bytes=total, url=url, allow=allow,
                         reason='would serve %d files on %s to %d address(es)' % (len(files), url, len(allow)))
    module.run_command(['systemctl', 'stop', p['unit']])
    rundir = p['rundir']
    if os.path.lexists(rundir) and not os.path.isdir(rundir) or os.path.islink(rundir):
        module.fail_json(msg='compile_cache: %s is not a directory; remove it' % rundir)
    if not os.path.isdir(rundir):
        os.makedirs(rundir, 0o700)
    os.chmod(rundir, 0o700)
    script = os.path.join(rundir, 'server.py')
    config = os.path.join(rundir, p['unit'] + '.json')
    with nofollow.opened_dir(rundir) as rfd:   # root-only files, never written through a link
        nofollow.write_atomic('server.py', rfd, daemon_server.script_source(cache_seed_server).encode('utf-8'), 0o600)
        nofollow.write_atomic(os.path.basename(config), rfd, json.dumps({
            'address': host, 'port': p['port'], 'allow': allow, 'root': p['cache_dir'],
            'token_sha256': cache_seed_server.token_digest(p['token']),
            'files': dict((f['path'], f['size']) for f in files)}, indent=1, sort_keys=True).encode('utf-8'), 0o600)
    python = module.get_bin_path('python3', required=True)
    argv = ['systemd-run', '--unit=' + p['unit'], '--collect', '--property=RuntimeMaxSec=%d' % p['serve_s'],
            '--description=inkling.fleet compile cache seed (read-only, stops after %d s)' % p['serve_s'],
            '--property=ExecStopPost=+/bin/rm -f %s' % config]
    argv += ['--property=%s' % prop for prop in SANDBOX]
    rc, out, err = module.run_command(argv + [python, script, config])
    if rc != 0:
        module.fail_json(msg='compile_cache: could not start the cache server: %s' % (err or out).strip())
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection((host, p['port']), timeout=2).close()
            break
        except (OSError, socket.error) as exc:
            if time.time() > deadline:
                module.fail_json(msg='compile_cache: the cache server on %s does not answer after 30 s: %s' % (url, exc))
            time.sleep(0.3)
    module.exit_json(changed=True, files=files, left_out=left_out, bytes=total, url=url, allow=allow,
                     reason='serving %d files (%d bytes) on %s for %d s to %d fleet address(es)%s'
                     % (len(files), total, url, p['serve_s'], len(allow),
                        '; not resolved here: %s' % ', '.join(unresolved) if unresolved else ''))


def fetch_one(p, entry, staging_fd):
    """Fetch one manifest entry into the staging directory, reading at most the listed size plus
    one byte. None when its size and SHA-256 match the manifest, else what was wrong."""
    url = p['source_url'].rstrip('/') + '/' + quote(entry['path'])
    resp = open_url(url, timeout=p['timeout_s'], validate_certs=False,
                    headers={'Authorization': 'Bearer %s' % p['token']} if p['token'] else None)
    h = hashlib.sha256()
    size = 0
    parent = nofollow.make_dirs(os.path.dirname(entry['path']), staging_fd, 0o750)
    try:
        fd = os.open(os.path.basename(entry['path']), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640,
                     dir_fd=parent)
    finally:
        os.close(parent)
    with os.fdopen(fd, 'wb') as out:
        while size <= entry['size']:
            chunk = resp.read(min(1024 * 1024, entry['size'] + 1 - size))
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if size != entry['size'] or h.hexdigest() != entry['sha256']:
        return '%s: got %s bytes sha256 %s, the source listed %d bytes sha256 %s' % (
            entry['path'], size if size <= entry['size'] else 'more than %d' % entry['size'],
            h.hexdigest()[:12], entry['size'], entry['sha256'][:12])
    return None


def move_into_place(cache_dir, staging_fd, manifest):
    """Rename every staged file into the set. The staging directory is out of the container's
    reach; in the set, the directories are opened without following links and a rename replaces
    whatever name is there (a planted link itself, never its target)."""
    with nofollow.opened_dir(cache_dir) as top:
        for entry in manifest:
            rel_dir, name = os.path.split(entry['path'])
            src = nofollow.make_dirs(rel_dir, staging_fd)
            try:
                dst = nofollow.make_dirs(rel_dir, top, 0o750, shown_top=cache_dir)
                try:
                    os.rename(name, name, src_dir_fd=src, dst_dir_fd=dst)
                finally:
                    os.close(dst)
            finally:
                os.close(src)


def seeded(module, p):
    problems = wc.check_manifest(p['manifest'], p['subdirs'])
    if problems:
        module.fail_json(msg='compile_cache: the manifest is not usable: %s' % '; '.join(problems[:5]))
    claim_changed, claim_reason, dummy = claim(module, p)
    total = sum(f['size'] for f in p['manifest'])
    if not p['source_url']:
        module.exit_json(changed=claim_changed, seeded=False, bytes=0, seconds=0.0,
                         reason='not seeded (no source given): %s' % claim_reason)
    if not wc.set_is_empty(p['cache_dir'], p['subdirs']):
        module.exit_json(changed=claim_changed, seeded=False, bytes=0, seconds=0.0,
                         reason='not seeded: the set already holds caches of this key')
    if not p['manifest']:
        module.exit_json(changed=claim_changed, seeded=False, bytes=0, seconds=0.0,
                         reason='not seeded: the source has no files')
    if module.check_mode:
        module.exit_json(changed=True, seeded=False, bytes=total, seconds=0.0,
                         reason='would seed %d files (%d bytes) from %s' % (len(p['manifest']), total, p['source_url']))
    t0 = time.time()
    parent_dir = os.path.dirname(os.path.normpath(p['cache_dir']))
    staging = staging_name(p['cache_dir'])
    with nofollow.opened_dir(parent_dir) as parent:
        with nofollow.opened_dir(p['cache_dir']) as top:
            nofollow.remove_tree_at(STAGING, top)
        nofollow.remove_tree_at(staging, parent)
        staging_fd, dummy = nofollow.make_dir(staging, parent, 0o700)
        try:
            try:
                for entry in p['manifest']:
                    err = fetch_one(p, entry, staging_fd)
                    if err:
                        raise ValueError(err)
                # Every file is right: move them all into place (the set was empty, nothing is replaced).
                move_into_place(p['cache_dir'], staging_fd, p['manifest'])
            except Exception as exc:  # pylint: disable=broad-except
                nofollow.remove_tree_at(staging, parent)
                with nofollow.opened_dir(p['cache_dir']) as top:
                    for sub in p['subdirs']:
                        if nofollow.lexists(sub, top):
                            with nofollow.opened_dir(sub, dir_fd=top, shown=os.path.join(p['cache_dir'], sub)) as fd:
                                nofollow.empty_dir(fd)
                module.exit_json(changed=claim_changed, seeded=False, bytes=0, seconds=round(time.time() - t0, 1),
                                 reason='not seeded (the host starts cold): %s' % exc)
        finally:
            os.close(staging_fd)
        nofollow.remove_tree_at(staging, parent)
    secs = round(time.time() - t0, 1)
    module.exit_json(changed=True, seeded=True, bytes=total, seconds=secs,
                     reason='seeded %d files (%d bytes) from %s in %.1f s' % (len(p['manifest']), total, p['source_url'], secs))


def pruned(module, p):
    root = p['cache_root']
    present = []
    if os.path.isdir(root):
        for variant in sorted(os.listdir(root)):
            vdir = os.path.join(root, variant)
            if os.path.isdir(vdir) and not os.path.islink(vdir):
                present += [[variant, d] for d in sorted(os.listdir(vdir))
                            if wc.HEX64_RE.match(d) and stat.S_ISDIR(os.lstat(os.path.join(vdir, d)).st_mode)]
    plan = wc.prune_plan(present, p['keep'])
    if plan and not module.check_mode:
        for variant, digest in plan:
            with nofollow.opened_dir(os.path.join(root, variant)) as vfd:
                nofollow.remove_tree_at(digest, vfd)
    kept = [e for e in present if e not in plan]
    module.exit_json(changed=bool(plan), removed=plan, kept=kept,
                     reason='removed %d set(s), kept %d' % (len(plan), len(kept)) if p['keep'] else
                     'nothing removed: no set to keep was named')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', required=True, choices=['present', 'claimed', 'listed', 'served', 'seeded', 'pruned']),
            cache_dir=dict(type='path'),
            subdirs=dict(type='list', elements='str', default=[]),
            key=dict(type='dict', no_log=False),
            manifest=dict(type='list', elements='dict', default=[]),
            source_url=dict(type='str'),
            timeout_s=dict(type='float', default=30),
            address=dict(type='str'),
            port=dict(type='int', default=8874),
            serve_s=dict(type='int', default=7200),
            unit=dict(type='str', default='inkling-cache-seed.service'),
            token=dict(type='str', no_log=True),
            allow=dict(type='list', elements='str', default=[]),
            rundir=dict(type='path', default='/run/inkling-cache-seed'),
            cache_root=dict(type='path'),
            keep=dict(type='list', elements='list', default=[]),
        ),
        required_if=[
            ('state', 'present', ['cache_dir']),
            ('state', 'claimed', ['cache_dir', 'key', 'subdirs']),
            ('state', 'listed', ['cache_dir', 'key', 'subdirs']),
            ('state', 'served', ['cache_dir', 'key', 'subdirs', 'address', 'token']),
            ('state', 'seeded', ['cache_dir', 'key', 'subdirs']),
            ('state', 'pruned', ['cache_root']),
        ],
        supports_check_mode=True,
    )
    p = module.params
    if p['key'] is not None:
        try:
            fields = [p['key'].get(f) for f in wc.KEY_FIELDS]
            key = wc.cache_key(*fields)
        except wc.KeyError_ as exc:
            module.fail_json(msg='compile_cache: the cache key is incomplete: %s. Expected the output of the '
                             'inkling.fleet.cache_key filter.' % exc)
        if key['id'] != p['key'].get('id'):
            module.fail_json(msg='compile_cache: the key id %r does not match its fields (%s)' % (p['key'].get('id'), key['id']))
        p['key'] = key
    if p['state'] not in ('pruned', 'present') and not os.path.isdir(p['cache_dir']):
        module.fail_json(msg='compile_cache: the cache set %s does not exist. Remedy: run the inkling.fleet.service '
                         'role first (it creates it).' % p['cache_dir'])
    try:
        {'present': present, 'claimed': claimed, 'listed': listed, 'served': served, 'seeded': seeded,
         'pruned': pruned}[p['state']](module, p)
    except nofollow.LinkRefused as exc:
        module.fail_json(msg='compile_cache: %s' % exc.strerror, path=exc.path)


if __name__ == '__main__':
    main()
