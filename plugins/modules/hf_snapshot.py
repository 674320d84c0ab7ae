#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_snapshot
short_description: Plan and verify a pinned Hugging Face hub cache snapshot on a host
version_added: "0.1.0"
description:
  - Works on the standard hub cache layout (C(models--ORG--NAME/{blobs,snapshots/REV,refs})) that
    C(huggingface_hub) and vLLM read with C(HF_HUB_OFFLINE=1).
  - O(phase=plan) resolves the revision to a 40-hex commit (a branch or tag is resolved once and
    recorded in C(refs/), then reused without asking the hub), finds what is missing or broken,
    checks free space against the bytes still to download plus a margin before anything is
    downloaded, and writes a plan file for M(inkling.fleet.hf_download). Broken blobs (wrong size or
    hash) are removed so that only they are fetched again.
  - When the snapshot was verified before (manifest and completion marker present), O(phase=plan)
    checks links, sizes and (size, mtime, inode) against the manifest without reading content and
    without contacting the hub, so a re-run takes time proportional to the number of files.
  - O(phase=finalize) verifies every file of the revision (present under C(snapshots/REV) as a
    relative link into C(blobs/), size as the hub says, sha256 for LFS files and git blob sha1 for
    small files on first staging), repairs links, checks that every shard of
    C(model.safetensors.index.json) resolves, refuses leftover C(.incomplete) blobs (field failures
    F10, F11 of docs/field-failures.md), sets owner and modes so the service can read but not write, and writes the manifest
    and then the completion marker, last.
  - In check mode nothing is written or removed; the result tells what would be downloaded or repaired.
  - O(phase=plan) needs C(huggingface_hub) on the host only when the hub must be asked (first staging,
    changed patterns, O(refresh_revision=true)); run it with the staging virtual environment's python.
  - With O(create_cache_dir), O(cache_dir) is first created or given its owner, group and mode, as
    M(ansible.builtin.file) with C(state=directory) does, so that a host needs no separate task for it.
  - With O(report_address=true) the result also carries this host's IPv4 address on its default route
    (RV(address)), so that a host needs no fact gathering for it.
  - With O(report_venv) the result also carries the C(huggingface_hub) version installed in that virtual
    environment (RV(venv_huggingface_hub_version)), so that a host needs no separate task to decide whether to
    install it. With O(local_only=true) the module needs no C(huggingface_hub) itself, so it can run with the
    host's own python before the staging virtual environment exists.
author:
  - inkling.fleet contributors (@inkling-fleet)
options:
  phase:
    description: V(plan) before downloading, V(finalize) after.
    type: str
    choices: [plan, finalize]
    required: true
  repo_id:
    description: Model repository, C(ORG/NAME).
    type: str
    required: true
  revision:
    description: Branch, tag or 40-hex commit to stage.
    type: str
    default: main
  cache_dir:
    description: The hub cache directory (what C(HF_HUB_CACHE) points at).
    type: path
    required: true
  endpoint:
    description: Hub endpoint or site mirror (C(HF_ENDPOINT)).
    type: str
    default: https://huggingface.co
  token:
    description:
      - Hub token for gated or private repositories. Never logged; written to disk only to O(token_file).
    type: str
  token_file:
    description:
      - With O(token) and a plan that downloads, write the token here, root-only (directory 0700, file 0600,
        never through a link), for M(inkling.fleet.hf_download) to read, because a background task's payload is a file
        in the SSH user's home, so it must carry no secret. Keep it outside the hub cache, which containers mount.
    type: path
    version_added: "0.2.0"
  allow_patterns:
    description: Only stage files matching one of these patterns (C(huggingface_hub) semantics).
    type: list
    elements: str
  ignore_patterns:
    description: Skip files matching one of these patterns.
    type: list
    elements: str
  metadata_source:
    description:
      - Where the file list (names, sizes, hashes) comes from when the snapshot is not already verified
        here. V(hub) asks the hub. V(manifest) reads the manifest that a peer or a source path shipped
        along with the files (C(.inkling/COMMIT.json)); its stat data is ignored and every blob is hashed.
    type: str
    choices: [hub, manifest]
    default: hub
  local_only:
    description:
      - Only look at what this host holds (O(phase=plan)); never contact the hub. When there is no verified
        manifest here, return RV(complete=false) (and RV(revision) when it is known locally) instead of failing.
    type: bool
    default: false
  refresh_revision:
    description: Ask the hub again what a branch or tag points at, instead of using the recorded commit.
    type: bool
    default: false
  rehash:
    description: Hash every blob again (full re-verification) instead of the manifest's stat check.
    type: bool
    default: false
  free_space_margin_pct:
    description: Headroom required above the bytes still to download, in percent.
    type: int
    default: 10
  owner:
    description: Owner of the staged tree (name or uid). Unchanged when omitted.
    type: str
  group:
    description: Group of the staged tree (name or gid). Unchanged when omitted.
    type: str
  mode:
    description: File mode (octal string) for blobs and refs; directories get x where r is set.
    type: str
    default: '0644'
  create_cache_dir:
    description:
      - Before anything else, make O(cache_dir) a directory with these attributes, as M(ansible.builtin.file)
        with C(state=directory) does. Missing directories (its parents too) are created and each gets them;
        an existing one gets them where they differ. Symbolic links are followed.
      - The task reports changed only when a directory was created or the owner, group or mode changed
        (RV(cache_dir_changes)); in check mode nothing is changed and the result tells what would be; with
        C(--diff) the diff shows the directory's C(state), C(owner), C(group) (numeric ids) and C(mode)
        before and after.
      - Omitted, O(cache_dir) is not touched (a missing one is looked into as an empty cache).
    type: dict
    suboptions:
      owner:
        description: Owner (name or uid). Unchanged (a new directory, this process's user) when omitted.
        type: str
      group:
        description: Group (name or gid). Unchanged (a new directory, this process's group) when omitted.
        type: str
      mode:
        description: Mode, an octal string such as V('0755'). Unchanged (a new directory, 0777 less the umask) when omitted.
        type: str
  report_address:
    description:
      - Also return RV(address), this host's IPv4 source address on its default route (what the fact
        C(ansible_default_ipv4.address) holds), found by connecting a UDP socket (no packet is sent, the
        network need not be reachable).
    type: bool
    default: false
  report_venv:
    description:
      - A virtual environment (the role's C(hf_cache_venv)) whose C(huggingface_hub) version to return as
        RV(venv_huggingface_hub_version), and what makes it unusable as RV(venv_problem). The version is read from
        the installed distribution's C(.dist-info/METADATA), in the C(site-packages) of the python version its
        C(pyvenv.cfg) names, without running that python; that version must be the one of the python
        C(bin/python) resolves to (a release upgrade changes the base python under a venv).
    type: path
notes:
  - Supports check mode and diff mode (the diff covers O(create_cache_dir)).
  - The manifest C(.inkling/COMMIT.json) and marker C(.inkling/COMMIT.complete) live inside the
    repository folder; C(huggingface_hub) ignores them.
seealso:
  - module: inkling.fleet.hf_download
  - module: ansible.builtin.file
  - module: inkling.fleet.hf_progress
'''

EXAMPLES = r'''
- name: Plan staging of Inkling-NVFP4
  inkling.fleet.hf_snapshot:
    phase: plan
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: main
    cache_dir: /var/lib/inkling/huggingface/hub
    endpoint: https://hf-mirror.example.internal
    token: "{{ vault_hf_token }}"
  vars:
    ansible_python_interpreter: /opt/inkling-fleet/venv/bin/python
  register: plan

- name: Verify, fix links and mark complete
  inkling.fleet.hf_snapshot:
    phase: finalize
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: "{{ plan.revision }}"
    cache_dir: /var/lib/inkling/huggingface/hub
    owner: root
    group: inkling
    mode: '0640'

- name: Create the cache directory and check what this host holds, without asking the hub
  inkling.fleet.hf_snapshot:
    phase: plan
    local_only: true
    repo_id: thinkingmachines/Inkling-NVFP4
    revision: main
    cache_dir: /var/lib/inkling/huggingface/hub
    create_cache_dir:
      owner: root
      group: root
      mode: '0755'
    report_address: true
    report_venv: /opt/inkling-fleet/venv
  register: held
'''

RETURN = r'''
revision:
  description: The resolved 40-hex commit.
  returned: success
  type: str
  sample: 3f6c5c1d1b0b5e4bd1b1e3a0f2b0f6b6a2f0c9d1
requested_revision:
  description: What was asked for.
  returned: success
  type: str
  sample: main
resolved_from:
  description: How the commit was found, V(commit), V(refs) (recorded earlier) or V(hub).
  returned: success
  type: str
path:
  description: Snapshot directory, C(CACHE/models--ORG--NAME/snapshots/COMMIT).
  returned: success
  type: str
repo_dir:
  description: Repository folder in the cache.
  returned: success
  type: str
complete:
  description: Whether the snapshot is verified and marked complete (after this task).
  returned: success
  type: bool
files_total:
  description: Number of files in the staged set.
  returned: success
  type: int
bytes_total:
  description: Size of the staged set.
  returned: success
  type: int
download:
  description: Files that must be downloaded (plan phase).
  returned: phase=plan
  type: list
  elements: dict
  sample: [{path: model-00002-of-00004.safetensors, size: 1048576, etag: "9f...", lfs: true}]
download_bytes:
  description: Bytes still to download, net of resumable partial files.
  returned: phase=plan
  type: int
plan_file:
  description: Plan written for the downloader (not in check mode).
  returned: phase=plan
  type: str
token_file:
  description: Where the token was written for the downloader (O(token_file)), when a token is given and files are to download.
  returned: phase=plan, with a token and something to download
  type: str
  version_added: "0.2.0"
progress_file:
  description: Where the downloader writes its progress.
  returned: phase=plan
  type: str
problems:
  description: What was wrong, one entry per file (kind is one of blob_missing, blob_size, blob_hash,
    link_missing, link_not_symlink, link_dangling, link_wrong_target, incomplete, index).
  returned: always
  type: list
  elements: dict
repaired:
  description: Files whose link was recreated or whose blob was removed for re-download.
  returned: success
  type: list
  elements: str
space:
  description: Free space check (free_bytes, needed_bytes, needed_with_margin_bytes, margin_pct, filesystem_path).
  returned: phase=plan
  type: dict
hashed_files:
  description: Number of blobs whose content was hashed by this task.
  returned: success
  type: int
cache_dir_changes:
  description:
    - What O(create_cache_dir) changed on O(cache_dir) (in check mode, would change), V(created) or some of
      V(owner), V(group), V(mode); empty when nothing or when O(create_cache_dir) is omitted.
  returned: success
  type: list
  elements: str
  sample: [mode]
address:
  description:
    - This host's IPv4 source address on its default route; an empty string when the host has no default
      route.
  returned: O(report_address=true)
  type: str
  sample: 10.88.0.12
venv_huggingface_hub_version:
  description:
    - The C(huggingface_hub) version installed in O(report_venv); an empty string when that environment does not
      exist, has no python that can run what it holds (RV(venv_problem)), does not hold C(huggingface_hub), or
      holds two installations of it.
  returned: O(report_venv) given
  type: str
  sample: 2.4.0
venv_problem:
  description:
    - Why the virtual environment O(report_venv) cannot be used as it is (installing into it would not help),
      an empty string when it can (also when it does not exist yet or lacks C(huggingface_hub)) - its python is
      a link to a removed file, its python is another version than the one it was made with, it has no
      C(site-packages) for its python, or it holds two installations of C(huggingface_hub).
  returned: O(report_venv) given
  type: str
  sample: 'its python /usr/bin/python3.13 is Python 3.13, but it was made with Python 3.11 (pyvenv.cfg): the base python changed'
'''

import os
import sys
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

HF_IMPORT_ERROR = None
try:
    os.environ.setdefault('HF_HUB_DISABLE_PROGRESS_BARS', '1')
    os.environ.setdefault('HF_HUB_DISABLE_TELEMETRY', '1')
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hf_errors
except ImportError:
    HF_IMPORT_ERROR = traceback.format_exc()


def host_name():
    return os.uname()[1]


def hub_metadata(module, repo_id, revision):
    """Ask the hub for the commit and the file list of revision."""
    p = module.params
    if HF_IMPORT_ERROR:
        module.fail_json(msg='%s: huggingface_hub is not importable by %s; run this task with the staging '
                             'virtual environment python (hf_cache_venv).' % (host_name(), sys.executable),
                         exception=HF_IMPORT_ERROR)
    api = HfApi(endpoint=p['endpoint'].rstrip('/'), token=p['token'] or False)
    where = '%s@%s from %s' % (repo_id, revision, p['endpoint'])
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
    except hf_errors.RevisionNotFoundError:
        module.fail_json(msg='%s: revision %r not found in %s at %s. Remedy: check the variant\'s model.revision '
                             '(a branch, tag or 40-hex commit of that repository).'
                             % (host_name(), revision, repo_id, p['endpoint']))
    except hf_errors.GatedRepoError:
        module.fail_json(msg='%s: %s is gated and the token gives no access. Remedy: accept the licence on the '
                             'hub for the token\'s account and set hf_cache_token.' % (host_name(), repo_id))
    except hf_errors.RepositoryNotFoundError:
        module.fail_json(msg='%s: repository %s not found at %s (or it is private and no valid token was given). '
                             'Remedy: check model.repo_id, hf_cache_endpoint and hf_cache_token.'
                             % (host_name(), repo_id, p['endpoint']))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg='%s: cannot read %s: %s: %s. Remedy: check that the host reaches hf_cache_endpoint '
                             '(proxy, DNS, firewall) or stage from a peer or path.'
                             % (host_name(), where, type(exc).__name__, exc))
    if not info.sha or not hc.is_commit(info.sha):
        module.fail_json(msg='%s: the hub gave no commit for %s' % (host_name(), where))
    try:
        entries = hc.entries_from_siblings(info.siblings or [])
    except hc.HfCacheError as exc:
        module.fail_json(msg='%s: %s (%s)' % (host_name(), exc, where))
    return info.sha, entries


def resolve(module, rdir):
    """Return (commit, how) without the hub when possible."""
    p = module.params
    rev = p['revision']
    if hc.is_commit(rev):
        return rev, 'commit'
    if not p['refresh_revision']:
        commit = hc.read_ref(rdir, rev)
        if commit:
            return commit, 'refs'
    return None, None


def uid_gid(module):
    try:
        return hc.resolve_owner(module.params['owner'], module.params['group'])
    except hc.HfCacheError as exc:
        module.fail_json(msg='%s: %s' % (host_name(), exc))


def base_result(p, rdir, commit, how, entries):
    return {
        'changed': False,
        'revision': commit,
        'requested_revision': p['revision'],
        'resolved_from': how,
        'repo_id': p['repo_id'],
        'repo_dir': rdir,
        'path': os.path.join(rdir, 'snapshots', commit),
        'files_total': len(entries),
        'bytes_total': sum(e.size for e in entries),
        'problems': [],
        'repaired': [],
        'hashed_files': 0,
    }


def prepare(module):
    """What runs before either phase: create_cache_dir and report_address. Returns the result keys."""
    p = module.params
    out = {'changed': False, 'cache_dir_changes': []}
    want = p['create_cache_dir']
    if want is not None:
        try:
            uid, gid = hc.resolve_owner(want['owner'], want['group'])
            mode = None if want['mode'] in (None, '') else hc.parse_mode(want['mode'])
        except hc.HfCacheError as exc:
            module.fail_json(msg='%s: create_cache_dir: %s. Remedy: check hf_cache_owner, hf_cache_group and '
                                 'hf_cache_mode.' % (host_name(), exc))
        try:
            changes, before, after = hc.ensure_directory(p['cache_dir'], uid, gid, mode, module.check_mode)
        except hc.HfCacheError as exc:
            module.fail_json(msg='%s: cannot create the hub cache directory: %s. Remedy: remove or move what is '
                                 'there, or point hf_cache_dir elsewhere.' % (host_name(), exc))
        out['cache_dir_changes'] = changes
        out['changed'] = bool(changes)
        if module._diff:
            out['diff'] = {'before': before, 'after': after,
                           'before_header': p['cache_dir'], 'after_header': p['cache_dir']}
    if p['report_address']:
        out['address'] = hc.default_route_address()
    if p['report_venv']:
        venv = hc.venv_distribution(p['report_venv'], 'huggingface_hub')
        out['venv_huggingface_hub_version'] = venv['version']
        out['venv_problem'] = venv['problem']
    return out


def finish(module, res, pre):
    """exit_json with the results of prepare() merged in."""
    res = dict(res)
    for key, value in pre.items():
        if key != 'changed':
            res[key] = value
    res['changed'] = bool(res.get('changed')) or pre['changed']
    module.exit_json(**res)


def own_manifest(p, rdir, commit):
    """Our verified manifest for commit when its file set matches the requested patterns."""
    man = hc.load_manifest(rdir, commit)
    if man and man.get('patterns') == hc.patterns_key(p['allow_patterns'], p['ignore_patterns']):
        return man
    return None


def run_plan(module, pre):
    p = module.params
    rdir = hc.repo_dir(p['cache_dir'], p['repo_id'])
    commit, how = resolve(module, rdir)
    man = own_manifest(p, rdir, commit) if commit else None
    known = {}
    if man:
        entries = hc.manifest_entries(man)
        known = hc.manifest_known(man)
    elif p['metadata_source'] == 'manifest':
        if not commit:
            module.fail_json(msg='%s: metadata_source=manifest needs a 40-hex revision or refs/%s copied with the '
                                 'files' % (host_name(), p['revision']))
        shipped = hc.read_json(hc.manifest_path(rdir, commit))
        if not shipped or shipped.get('revision') != commit:
            module.fail_json(msg='%s: no manifest for %s at %s; the copy source did not ship a verified snapshot. '
                                 'Remedy: stage from the hub.' % (host_name(), commit, hc.manifest_path(rdir, commit)))
        entries = hc.filter_entries(hc.manifest_entries(shipped), p['allow_patterns'], p['ignore_patterns'])
        how = how or 'manifest'
    elif p['local_only']:
        finish(module, dict(changed=False, complete=False, revision=commit, requested_revision=p['revision'],
                            resolved_from=how, repo_id=p['repo_id'], repo_dir=rdir, problems=[], download=[],
                            download_bytes=None, path=os.path.join(rdir, 'snapshots', commit) if commit else None,
                            msg='no verified snapshot of %s@%s here' % (p['repo_id'], p['revision'])), pre)
    else:
        commit, entries = hub_metadata(module, p['repo_id'], commit or p['revision'])
        how = how or 'hub'
        entries = hc.filter_entries(entries, p['allow_patterns'], p['ignore_patterns'])
        if not entries:
            module.fail_json(msg='%s: no file of %s@%s matches allow %s / ignore %s'
                                 % (host_name(), p['repo_id'], commit, p['allow_patterns'], p['ignore_patterns']))
        man = own_manifest(p, rdir, commit)
        if man:
            known = hc.manifest_known(man)
    # blobs the downloader already hashed in an interrupted run count as known
    rec = hc.read_json(hc.hashed_path(rdir, commit), {}) or {}
    for k, v in rec.items():
        known.setdefault(k, v)

    res = base_result(p, rdir, commit, how, entries)
    insp = hc.inspect(rdir, commit, entries, want_hash='all' if p['rehash'] else 'unknown', known=known)
    res['hashed_files'] = len(insp['hashed'])
    problems = insp['problems']
    res['problems'] = [x.to_dict() for x in problems]
    download = hc.refetch_entries(entries, problems)
    stale = [n for n in insp['incomplete'] if n[:-len('.incomplete')] not in set(e.etag for e in download)]
    res['stale_incomplete'] = stale

    # remove blobs that are present but wrong, so that only they are fetched again
    repaired = []
    for pr in problems:
        if pr.kind in ('blob_size', 'blob_hash'):
            repaired.append(pr.path)
            if not module.check_mode:
                e = [x for x in entries if x.path == pr.path][0]
                hc.remove_bad_blob(rdir, e)
                if pr.kind == 'blob_hash':
                    # a partial download of that blob cannot be trusted either
                    ip = hc.incomplete_path(rdir, e.etag)
                    if os.path.exists(ip):
                        os.unlink(ip)
    res['repaired'] = repaired
    res['download'] = [e.to_dict() for e in download]
    res['download_bytes'] = hc.bytes_needed(rdir, download)
    ok, msg, space = hc.space_check(p['cache_dir'], res['download_bytes'], p['free_space_margin_pct'], host_name())
    res['space'] = space
    if not ok:
        res['msg'] = msg
        module.fail_json(**res)

    marker = os.path.exists(hc.marker_path(rdir, commit))
    res['complete'] = bool(man) and marker and not problems and not stale
    res['progress_file'] = os.path.join(hc.state_dir(rdir), commit + '.progress.json')
    res['plan_file'] = hc.plan_path(rdir, commit)
    if not res['complete']:
        res['changed'] = True
        if not module.check_mode:
            if marker:
                hc.clear_marker(rdir, commit)
            hc.write_json_atomic(res['plan_file'], {
                'repo_id': p['repo_id'], 'revision': commit, 'requested_revision': p['revision'],
                'cache_dir': p['cache_dir'], 'repo_dir': rdir,
                'files': [e.to_dict() for e in entries], 'download': res['download'],
                'patterns': hc.patterns_key(p['allow_patterns'], p['ignore_patterns']),
                'hashed': insp['hashed'],
            }, mode=0o600)
            if p['token'] and p['token_file'] and download:
                hc.write_secret_file(p['token_file'], p['token'])
                res['token_file'] = p['token_file']
    n = len(download)
    res['msg'] = ('%s@%s (%s): complete, %d files verified' % (p['repo_id'], commit[:12], how, len(entries))
                  if res['complete'] else
                  '%s@%s (%s): %d of %d files to download (%s), %d problems' % (
                      p['repo_id'], commit[:12], how, n, len(entries), hc.human_bytes(res['download_bytes']),
                      len(problems)))
    finish(module, res, pre)


def run_finalize(module, pre):
    p = module.params
    rdir = hc.repo_dir(p['cache_dir'], p['repo_id'])
    commit, how = resolve(module, rdir)
    if not commit:
        module.fail_json(msg='%s: finalize needs a 40-hex revision or a recorded refs/%s' % (host_name(), p['revision']))
    plan = hc.read_json(hc.plan_path(rdir, commit))
    man = own_manifest(p, rdir, commit)
    if plan:
        entries = [hc.FileEntry.from_dict(d) for d in plan['files']]
        requested = plan.get('requested_revision') or p['revision']
    elif man:
        entries = hc.manifest_entries(man)
        requested = man.get('requested_revision') or p['revision']
    else:
        module.fail_json(msg='%s: nothing to finalize for %s@%s: no plan and no manifest in %s. Remedy: run '
                             'phase=plan first.' % (host_name(), p['repo_id'], commit, rdir))
    known = hc.manifest_known(man) if man else {}
    known.update((plan or {}).get('hashed') or {})
    rec = hc.read_json(hc.hashed_path(rdir, commit), {}) or {}
    for k, v in rec.items():
        known.setdefault(k, v)

    res = base_result(p, rdir, commit, how or 'plan', entries)
    insp = hc.inspect(rdir, commit, entries, want_hash='all' if p['rehash'] else 'unknown', known=known)
    res['hashed_files'] = len(insp['hashed'])
    changed = False
    remaining = []
    for pr in insp['problems']:
        if pr.kind.startswith('link_'):
            res['repaired'].append(pr.path)
            if not module.check_mode:
                e = [x for x in entries if x.path == pr.path][0]
                changed |= hc.fix_link(rdir, commit, e)
            else:
                changed = True
        else:
            remaining.append(pr)
    etags = set(e.etag for e in entries)
    for name in insp['incomplete']:
        if name[:-len('.incomplete')] in etags:
            remaining.append(hc.Problem(name, 'incomplete', 'partial download left in blobs/ (interrupted or disk full)'))
    if not remaining and not module.check_mode:
        remaining.extend(hc.check_index(rdir, commit, entries))
    res['problems'] = [x.to_dict() for x in remaining]
    if remaining:
        if not module.check_mode:
            hc.clear_marker(rdir, commit)
        res['complete'] = False
        lines = '; '.join(str(x) for x in remaining[:20])
        more = '' if len(remaining) <= 20 else ' (and %d more)' % (len(remaining) - 20)
        res['msg'] = ('%s: snapshot %s@%s failed verification, %d problem(s): %s%s. It is not marked complete. '
                      'Remedy: re-run the hf_cache role (only these files are fetched again); if it repeats, check '
                      'the disk and the endpoint.' % (host_name(), p['repo_id'], commit, len(remaining), lines, more))
        module.fail_json(**res)

    if module.check_mode:
        res['changed'] = changed or not man
        res['complete'] = bool(man) and not changed
        finish(module, res, pre)

    uid, gid = uid_gid(module)
    try:
        mode = hc.parse_mode(p['mode'])
    except hc.HfCacheError as exc:
        module.fail_json(msg='%s: %s' % (host_name(), exc))
    changed |= hc.commit_snapshot(rdir, p['repo_id'], commit, requested, entries, insp['stats'],
                                  plan['patterns']['allow'] if plan else p['allow_patterns'],
                                  plan['patterns']['ignore'] if plan else p['ignore_patterns'],
                                  uid, gid, mode, old_manifest=man)
    res['changed'] = changed
    res['complete'] = True
    res['msg'] = '%s@%s verified: %d files, %s' % (
        p['repo_id'], commit[:12], len(entries), hc.human_bytes(res['bytes_total']))
    finish(module, res, pre)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            phase=dict(type='str', required=True, choices=['plan', 'finalize']),
            repo_id=dict(type='str', required=True),
            revision=dict(type='str', default='main'),
            cache_dir=dict(type='path', required=True),
            endpoint=dict(type='str', default='https://huggingface.co'),
            token=dict(type='str', no_log=True),
            token_file=dict(type='path'),
            allow_patterns=dict(type='list', elements='str'),
            ignore_patterns=dict(type='list', elements='str'),
            metadata_source=dict(type='str', default='hub', choices=['hub', 'manifest']),
            local_only=dict(type='bool', default=False),
            refresh_revision=dict(type='bool', default=False),
            rehash=dict(type='bool', default=False),
            free_space_margin_pct=dict(type='int', default=hc.STAGING_MARGIN_PCT),
            owner=dict(type='str'),
            group=dict(type='str'),
            mode=dict(type='str', default='0644'),
            create_cache_dir=dict(type='dict', options=dict(
                owner=dict(type='str'),
                group=dict(type='str'),
                mode=dict(type='str'),
            )),
            report_address=dict(type='bool', default=False),
            report_venv=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    try:
        hc.repo_folder_name(module.params['repo_id'])
        pre = prepare(module)
        if module.params['phase'] == 'plan':
            run_plan(module, pre)
        else:
            run_finalize(module, pre)
    except hc.HfCacheError as exc:
        module.fail_json(msg='%s: %s' % (host_name(), exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='%s: %s' % (host_name(), exc), exception=traceback.format_exc())


if __name__ == '__main__':
    main()
