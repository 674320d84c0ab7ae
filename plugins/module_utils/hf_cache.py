# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Hugging Face hub cache layout, verification and manifest for inkling.fleet.

Pure standard library so that it can be unit-tested without Ansible or
huggingface_hub. The layout is the one huggingface_hub writes::

    <cache_dir>/models--ORG--NAME/
        blobs/<etag>                 file content; etag = LFS sha256 or git blob sha1
        snapshots/<commit>/<path>    relative symlink -> ../../blobs/<etag>
        refs/<branch-or-tag>         file holding the 40-hex commit
        .inkling/<commit>.json       our manifest (written after verification)
        .inkling/<commit>.complete   our completion marker (written last)

Field failures covered (docs/field-failures.md): F10 (dangling links after a copy), F11 (partial
snapshot that looks complete: ``.incomplete`` blobs, short blobs, no space).
Also shared by the modules: the progress file, the final recording of a verified
snapshot.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import threading
import time

from ansible_collections.inkling.fleet.plugins.module_utils import atomic_file

MANIFEST_VERSION = 1
STATE_DIRNAME = '.inkling'
HASH_CHUNK = 8 * 1024 * 1024
COMMIT_RE = re.compile(r'^[0-9a-f]{40}$')
SAFETENSORS_INDEX = 'model.safetensors.index.json'


class HfCacheError(Exception):
    """An error with a message meant for the operator."""


# --------------------------------------------------------------------------
# names and paths
# --------------------------------------------------------------------------

def is_commit(revision):
    return bool(revision) and bool(COMMIT_RE.match(revision))


def repo_folder_name(repo_id, repo_type='model'):
    if not repo_id or repo_id.count('/') != 1 or repo_id.startswith('/') or repo_id.endswith('/'):
        raise HfCacheError("repo_id %r must look like ORG/NAME" % (repo_id,))
    return '%ss--%s' % (repo_type, repo_id.replace('/', '--'))


def repo_dir(cache_dir, repo_id):
    return os.path.join(cache_dir, repo_folder_name(repo_id))


def state_dir(rdir):
    return os.path.join(rdir, STATE_DIRNAME)


def manifest_path(rdir, commit):
    return os.path.join(state_dir(rdir), commit + '.json')


def marker_path(rdir, commit):
    return os.path.join(state_dir(rdir), commit + '.complete')


def plan_path(rdir, commit):
    return os.path.join(state_dir(rdir), commit + '.plan.json')


def hashed_path(rdir, commit):
    return os.path.join(state_dir(rdir), commit + '.hashed.json')


def blob_path(rdir, etag):
    return os.path.join(rdir, 'blobs', etag)


def incomplete_path(rdir, etag):
    return blob_path(rdir, etag) + '.incomplete'


def link_path(rdir, commit, rel):
    return os.path.join(rdir, 'snapshots', commit, *rel.split('/'))


def link_target(rdir, commit, rel, etag):
    """Relative target of the snapshot link, as huggingface_hub writes it."""
    link = link_path(rdir, commit, rel)
    return os.path.relpath(blob_path(rdir, etag), os.path.dirname(link))


def safe_rel_path(rel):
    """Refuse repository paths that would escape the snapshot directory."""
    if not rel or rel.startswith('/') or '\\' in rel:
        raise HfCacheError('unsafe file name in repository: %r' % (rel,))
    parts = rel.split('/')
    if any(p in ('', '.', '..') for p in parts):
        raise HfCacheError('unsafe file name in repository: %r' % (rel,))
    return rel


# --------------------------------------------------------------------------
# revision metadata
# --------------------------------------------------------------------------

class FileEntry(object):
    """One file of a revision, as the hub describes it."""

    __slots__ = ('path', 'size', 'etag', 'lfs')

    def __init__(self, path, size, etag, lfs):
        self.path = safe_rel_path(path)
        self.size = int(size)
        self.etag = etag
        self.lfs = bool(lfs)
        if not re.match(r'^[0-9a-f]{40}$|^[0-9a-f]{64}$', etag or ''):
            raise HfCacheError('file %s: hub gave no usable hash (%r)' % (path, etag))

    @property
    def algo(self):
        return 'sha256' if self.lfs else 'git-sha1'

    def to_dict(self):
        return {'path': self.path, 'size': self.size, 'etag': self.etag, 'lfs': self.lfs}

    @classmethod
    def from_dict(cls, data):
        return cls(data['path'], data['size'], data['etag'], data['lfs'])

    def __repr__(self):
        return 'FileEntry(%r, %d, %s)' % (self.path, self.size, self.etag[:12])


def entries_from_siblings(siblings):
    """Build entries from the hub's ``siblings`` list (API JSON or huggingface_hub objects).

    Each sibling needs ``rfilename``, ``size``, ``blobId`` and, for LFS files, ``lfs.sha256``.
    """
    out = []
    for sib in siblings:
        if isinstance(sib, dict):
            name, size, blob_id, lfs = sib.get('rfilename'), sib.get('size'), sib.get('blobId'), sib.get('lfs')
        else:  # huggingface_hub RepoSibling
            name, size, blob_id, lfs = sib.rfilename, sib.size, sib.blob_id, sib.lfs
        if lfs is not None and not isinstance(lfs, dict):
            lfs = {'sha256': lfs.sha256, 'size': lfs.size}
        if size is None:
            raise HfCacheError('file %s: the hub metadata has no size (endpoint does not support files_metadata)' % name)
        if lfs:
            out.append(FileEntry(name, lfs.get('size', size), lfs['sha256'], True))
        else:
            out.append(FileEntry(name, size, blob_id, False))
    return sorted(out, key=lambda e: e.path)


def _add_wildcard(pattern):
    return pattern + '*' if pattern.endswith('/') else pattern


def filter_entries(entries, allow_patterns=None, ignore_patterns=None):
    """Same matching as huggingface_hub.utils.filter_repo_objects (fnmatchcase, dir/ -> dir/*)."""
    allow = [_add_wildcard(p) for p in allow_patterns] if allow_patterns else None
    ignore = [_add_wildcard(p) for p in ignore_patterns] if ignore_patterns else None
    out = []
    for e in entries:
        if allow is not None and not any(fnmatch.fnmatchcase(e.path, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatchcase(e.path, p) for p in ignore):
            continue
        out.append(e)
    return out


# --------------------------------------------------------------------------
# hashing
# --------------------------------------------------------------------------

def new_hasher(entry):
    """Hasher for an entry: sha256 for LFS files, git blob sha1 (with header) otherwise."""
    if entry.lfs:
        return hashlib.sha256()
    h = hashlib.sha1()
    h.update(b'blob %d\0' % entry.size)
    return h


def hash_file(path, entry, chunk=HASH_CHUNK):
    h = new_hasher(entry)
    with open(path, 'rb') as f:
        while True:
            data = f.read(chunk)
            if not data:
                break
            h.update(data)
    return h.hexdigest()


def git_blob_sha1_bytes(data):
    h = hashlib.sha1()
    h.update(b'blob %d\0' % len(data))
    h.update(data)
    return h.hexdigest()


def stat_key(path):
    st = os.stat(path)
    return {'size': st.st_size, 'mtime_ns': st.st_mtime_ns, 'ino': st.st_ino}


# --------------------------------------------------------------------------
# small JSON files, written atomically
# --------------------------------------------------------------------------

def write_secret_file(path, text):
    """Write ``text`` to ``path``, root-only (directory 0700, file 0600), never through a link: the
    token a background download reads, so that its payload carries no secret. Refuses a link or a
    non-directory where the directory should be."""
    d = os.path.dirname(path)
    if not os.path.lexists(d):
        os.makedirs(d, 0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, 'not a directory (a link or a file): refusing to write the token there', d)
    os.chmod(d, 0o700)
    tmp = '%s.tmp.%d' % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(text)
        os.rename(tmp, path)  # replaces a planted link itself, never its target
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def read_secret_file(path, remove=False):
    """The text of a file written by write_secret_file, opened without following a link; removed
    afterwards when ``remove``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        text = f.read().strip()
    if remove:
        os.unlink(path)
    return text


def write_json_atomic(path, data, mode=0o644):
    d = os.path.dirname(path)
    if not os.path.isdir(d):
        os.makedirs(d)
    tmp = '%s.tmp.%d' % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def fill(f):
        json.dump(data, f, indent=1, sort_keys=True)
        f.write('\n')
        f.flush()
        os.fsync(f.fileno())
    atomic_file.replace_file(fd, tmp, path, mode, fill)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return default
        raise
    except ValueError:
        return default


# --------------------------------------------------------------------------
# inspection and verification
# --------------------------------------------------------------------------

class Problem(object):
    """Something wrong with one file of the snapshot."""

    # kinds, worst first; "blob_*" means the blob must be fetched again
    KINDS = ('blob_missing', 'blob_size', 'blob_hash', 'link_missing', 'link_not_symlink',
             'link_dangling', 'link_wrong_target', 'incomplete', 'index')

    def __init__(self, path, kind, detail):
        self.path = path
        self.kind = kind
        self.detail = detail

    @property
    def refetch(self):
        return self.kind.startswith('blob_')

    def to_dict(self):
        return {'path': self.path, 'kind': self.kind, 'detail': self.detail}

    def __str__(self):
        return '%s: %s' % (self.path, self.detail)

    def __repr__(self):
        return 'Problem(%r, %r)' % (self.path, self.kind)


def check_link(rdir, commit, entry):
    """Return a Problem for the snapshot link of entry, or None when it is right."""
    link = link_path(rdir, commit, entry.path)
    want = link_target(rdir, commit, entry.path, entry.etag)
    if not os.path.lexists(link):
        return Problem(entry.path, 'link_missing', 'missing from snapshots/%s' % commit)
    if not os.path.islink(link):
        return Problem(entry.path, 'link_not_symlink', 'is a regular file, not a link into blobs/')
    got = os.readlink(link)
    if got != want:
        if not os.path.exists(link):
            return Problem(entry.path, 'link_dangling', 'dangling link to %s' % got)
        return Problem(entry.path, 'link_wrong_target', 'links to %s, expected %s' % (got, want))
    if not os.path.exists(link):
        return Problem(entry.path, 'link_dangling', 'dangling link to %s (blob missing)' % got)
    return None


def check_blob(rdir, entry, want_hash, known=None):
    """Check the blob of entry.

    ``known`` maps etag -> {size, mtime_ns, ino} for blobs already hashed (manifest or
    downloader record); a blob whose stat matches is not read again unless want_hash='all'.
    want_hash: 'none' (size only), 'unknown' (hash what is not known), 'all'.
    Returns (problem_or_None, hashed_bool, stat_or_None).
    """
    bp = blob_path(rdir, entry.etag)
    try:
        st = stat_key(bp)
    except OSError:
        return Problem(entry.path, 'blob_missing', 'blob %s missing' % entry.etag), False, None
    if not os.path.isfile(bp) or os.path.islink(bp):
        return Problem(entry.path, 'blob_missing', 'blob %s is not a regular file' % entry.etag), False, None
    if st['size'] != entry.size:
        return (Problem(entry.path, 'blob_size', 'blob is %d bytes, hub says %d' % (st['size'], entry.size)),
                False, st)
    rec = (known or {}).get(entry.etag)
    do_hash = want_hash == 'all' or (want_hash == 'unknown' and rec != st)
    if not do_hash:
        return None, False, st
    got = hash_file(bp, entry)
    if got != entry.etag:
        return (Problem(entry.path, 'blob_hash', '%s is %s, hub says %s' % (entry.algo, got, entry.etag)),
                True, st)
    return None, True, st


def incomplete_blobs(rdir):
    blobs = os.path.join(rdir, 'blobs')
    try:
        names = os.listdir(blobs)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith('.incomplete'))


def check_index(rdir, commit, entries):
    """F10: every shard named in model.safetensors.index.json must resolve with non-zero size."""
    names = set(e.path for e in entries)
    problems = []
    for e in entries:
        if not e.path.endswith(SAFETENSORS_INDEX):
            continue
        base = e.path[:-len(SAFETENSORS_INDEX)]
        p = link_path(rdir, commit, e.path)
        try:
            with open(p) as f:
                weight_map = json.load(f)['weight_map']
            shards = sorted(set(weight_map.values()))
        except (OSError, IOError, ValueError, KeyError, TypeError) as exc:
            problems.append(Problem(e.path, 'index', 'index unreadable (%s); cannot confirm the shard count' % exc))
            continue
        for shard in shards:
            rel = base + shard
            sp = link_path(rdir, commit, rel)
            if rel not in names:
                problems.append(Problem(rel, 'index', 'named in %s but not part of the staged file set' % e.path))
            elif not os.path.exists(sp) or os.path.getsize(sp) == 0:
                problems.append(Problem(rel, 'index', 'shard named in %s does not resolve to a non-empty file' % e.path))
    return problems


def inspect(rdir, commit, entries, want_hash='unknown', known=None):
    """Inspect a snapshot without changing it.

    Returns a dict: problems (list of Problem), hashed (etag -> stat for blobs hashed
    now and found right), stats (etag -> stat of every good blob), incomplete (names).
    """
    problems, hashed, stats = [], {}, {}
    seen_blob = {}
    for e in entries:
        if e.etag in seen_blob:
            prob = seen_blob[e.etag]
        else:
            prob, did_hash, st = check_blob(rdir, e, want_hash, known)
            seen_blob[e.etag] = prob
            if prob is None:
                stats[e.etag] = st
                if did_hash:
                    hashed[e.etag] = st
        if prob is not None:
            problems.append(Problem(e.path, prob.kind, prob.detail))
            continue
        lp = check_link(rdir, commit, e)
        if lp is not None:
            problems.append(lp)
    inc = incomplete_blobs(rdir)
    return {'problems': problems, 'hashed': hashed, 'stats': stats, 'incomplete': inc}


def refetch_entries(entries, problems):
    bad = set(p.path for p in problems if p.refetch)
    return [e for e in entries if e.path in bad]


# --------------------------------------------------------------------------
# repairs that need no download
# --------------------------------------------------------------------------

def fix_link(rdir, commit, entry):
    """Create or replace the relative snapshot link. Returns True when changed."""
    link = link_path(rdir, commit, entry.path)
    want = link_target(rdir, commit, entry.path, entry.etag)
    if os.path.islink(link) and os.readlink(link) == want:
        return False
    d = os.path.dirname(link)
    if not os.path.isdir(d):
        os.makedirs(d)
    if os.path.lexists(link):
        if os.path.isdir(link) and not os.path.islink(link):
            raise HfCacheError('%s is a directory where a link into blobs/ belongs' % link)
        os.unlink(link)
    tmp = link + '.inkling-tmp'
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(want, tmp)
    os.rename(tmp, link)
    return True


def remove_bad_blob(rdir, entry):
    bp = blob_path(rdir, entry.etag)
    if os.path.lexists(bp):
        os.unlink(bp)
        return True
    return False


def write_ref(rdir, name, commit):
    """Record branch/tag -> commit in refs/ (what huggingface_hub reads offline)."""
    if is_commit(name) or not name:
        return False
    path = os.path.join(rdir, 'refs', *name.split('/'))
    try:
        with open(path) as f:
            if f.read().strip() == commit:
                return False
    except (IOError, OSError):
        pass
    d = os.path.dirname(path)
    if not os.path.isdir(d):
        os.makedirs(d)
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        f.write(commit)
    os.rename(tmp, path)
    return True


def read_ref(rdir, name):
    if not name or is_commit(name):
        return name or None
    try:
        with open(os.path.join(rdir, 'refs', *name.split('/'))) as f:
            val = f.read().strip()
    except (IOError, OSError):
        return None
    return val if is_commit(val) else None


# --------------------------------------------------------------------------
# pruning old revisions (module hf_prune)
# --------------------------------------------------------------------------
STATE_SUFFIXES = ('.complete', '.plan.json', '.hashed.json', '.progress.json', '.json')


def _scan(path):
    """Entries of a directory, never following a link; [] when it is missing or not a directory."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return []
        return list(os.scandir(path))
    except OSError:
        return []


def _blob_of_link(rdir, link):
    """The blob name a snapshot link points to (read, never followed), or None when it points elsewhere."""
    try:
        target = os.readlink(link)
    except OSError:
        return None
    blobs = os.path.join(rdir, 'blobs')
    full = os.path.normpath(os.path.join(os.path.dirname(link), target))
    return os.path.basename(full) if os.path.dirname(full) == blobs else None


def _kept_blobs(rdir, commit):
    """The blobs a snapshot uses: what its links point to and what its manifest lists."""
    names = set()
    stack = [os.path.join(rdir, 'snapshots', commit)]
    while stack:
        for entry in _scan(stack.pop()):
            if entry.is_symlink():
                name = _blob_of_link(rdir, entry.path)
                if name:
                    names.add(name)
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    manifest = read_json(manifest_path(rdir, commit)) or {}
    for item in manifest.get('files') or []:
        if isinstance(item, dict) and isinstance(item.get('etag'), str):
            names.add(item['etag'])
    return names


def prune_plan(rdir, keep):
    """What removing every revision of the repository folder ``rdir`` but the commits in ``keep`` removes.

    Returns ``{'kept', 'revisions', 'refs', 'state_files', 'blobs', 'bytes'}``: the snapshot folders of other
    commits (only folders named by a 40-hex commit), the refs (branch or tag files) that name one of them, their
    manifests, markers and plans, and the blobs no kept snapshot uses (by link or by manifest); partial files
    (``.incomplete``) and anything else are left. Nothing is followed: links are read, never entered.
    Raises HfCacheError when ``keep`` names no commit (that would remove everything)."""
    kept = sorted(set(c for c in keep if is_commit(c)))
    if not kept:
        raise HfCacheError('no commit to keep in %r: pruning would remove every revision; nothing removed' % (keep,))
    snaps = os.path.join(rdir, 'snapshots')
    revisions = sorted(e.name for e in _scan(snaps)
                       if is_commit(e.name) and e.name not in kept and e.is_dir(follow_symlinks=False))
    refs, stack = [], [os.path.join(rdir, 'refs')]
    while stack:
        for entry in _scan(stack.pop()):
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                try:
                    with open(entry.path) as f:
                        named = f.read().strip()
                except (IOError, OSError):
                    continue
                if is_commit(named) and named not in kept:
                    refs.append(entry.path)
    state = set(e.name for e in _scan(state_dir(rdir)) if e.is_file(follow_symlinks=False))
    removed = set(revisions)
    state_files = sorted(os.path.join(state_dir(rdir), name) for name in state
                         if any(name == c + sfx for c in removed for sfx in STATE_SUFFIXES))
    used = set()
    for commit in kept:
        used |= _kept_blobs(rdir, commit)
    blobs, size = [], 0
    for entry in _scan(os.path.join(rdir, 'blobs')):
        if entry.name in used or entry.name.endswith('.incomplete') or not entry.is_file(follow_symlinks=False):
            continue
        blobs.append(entry.path)
        size += entry.stat(follow_symlinks=False).st_size
    return {'kept': kept, 'revisions': revisions, 'refs': sorted(refs), 'state_files': state_files,
            'blobs': sorted(blobs), 'bytes': size}


def prune_apply(rdir, plan):
    """Remove what ``prune_plan`` listed, in an order that is safe to interrupt: refs and markers first (the
    revision stops being complete before its files go), then the snapshot folders, then the blobs."""
    for path in plan['refs'] + plan['state_files']:
        try:
            os.unlink(path)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
    for commit in plan['revisions']:
        path = os.path.join(rdir, 'snapshots', commit)
        if os.path.lexists(path) and stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
    for path in plan['blobs']:
        try:
            os.unlink(path)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise


# --------------------------------------------------------------------------
# manifest and marker
# --------------------------------------------------------------------------

def patterns_key(allow_patterns, ignore_patterns):
    return {'allow': sorted(allow_patterns) if allow_patterns else None,
            'ignore': sorted(ignore_patterns) if ignore_patterns else None}


def build_manifest(repo_id, commit, requested, entries, stats, allow_patterns, ignore_patterns):
    files = []
    for e in entries:
        d = e.to_dict()
        d['stat'] = stats[e.etag]
        files.append(d)
    return {
        'version': MANIFEST_VERSION,
        'repo_id': repo_id,
        'revision': commit,
        'requested_revision': requested,
        'patterns': patterns_key(allow_patterns, ignore_patterns),
        'files': files,
        'total_bytes': sum(e.size for e in entries),
        'verified_at': int(time.time()),
    }


def load_manifest(rdir, commit):
    """Return the manifest when it and the completion marker exist, else None."""
    if not os.path.exists(marker_path(rdir, commit)):
        return None
    data = read_json(manifest_path(rdir, commit))
    if not isinstance(data, dict) or data.get('version') != MANIFEST_VERSION or data.get('revision') != commit:
        return None
    return data


def manifest_entries(manifest):
    return [FileEntry.from_dict(f) for f in manifest['files']]


def manifest_known(manifest):
    return dict((f['etag'], f['stat']) for f in manifest['files'])


def quick_verify(rdir, commit, manifest):
    """Re-run check: links, sizes and (size, mtime, inode) against the manifest; reads no content
    except for blobs whose stat changed. Time grows with the number of files, not bytes."""
    entries = manifest_entries(manifest)
    res = inspect(rdir, commit, entries, want_hash='unknown', known=manifest_known(manifest))
    res['entries'] = entries
    return res


def clear_marker(rdir, commit):
    mp = marker_path(rdir, commit)
    if os.path.exists(mp):
        os.unlink(mp)
        return True
    return False


def write_marker(rdir, commit):
    path = marker_path(rdir, commit)
    with open(path + '.tmp', 'w') as f:
        f.write('%s verified %d\n' % (commit, int(time.time())))
    os.rename(path + '.tmp', path)


# --------------------------------------------------------------------------
# free space (F11)
# --------------------------------------------------------------------------

def existing_ancestor(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path):
    st = os.statvfs(existing_ancestor(path))
    return st.f_bavail * st.f_frsize


# The free-space margin of staging, defined once: hf_cache's space check and preflight's disk check both add it
# to the bytes still to write (the roles' hf_cache_free_space_margin_pct and preflight_disk_margin_pct default to
# it; tests/unit/plugins/module_utils/test_staging_space.py keeps them equal).
STAGING_MARGIN_PCT = 10


def staging_need(missing_bytes, margin_pct=STAGING_MARGIN_PCT):
    """The free space staging needs: the bytes still to write plus the margin (hf_cache and preflight alike)."""
    return int(int(missing_bytes or 0) * (100 + float(margin_pct or 0)) / 100.0)


def missing_bytes(rdir, files):
    """Bytes of the listed blobs (dicts or FileEntry with etag and size; the hub's list of one revision) that the
    repository folder does not hold yet: what staging that revision writes. A blob is held when it is a regular
    file of the listed size (never followed); a partial ``.incomplete`` file counts for what it holds. Blobs of
    other revisions count for nothing unless the new revision lists them too."""
    need, seen = 0, set()
    for f in files or []:
        etag, size = (f.get('etag'), f.get('size')) if isinstance(f, dict) else (f.etag, f.size)
        if not isinstance(etag, str) or etag in seen or not isinstance(size, int):
            continue
        seen.add(etag)
        try:
            st = os.lstat(blob_path(rdir, etag))
            if stat.S_ISREG(st.st_mode) and st.st_size == size:
                continue
        except OSError:
            pass
        have = 0
        try:
            have = os.lstat(incomplete_path(rdir, etag)).st_size
        except OSError:
            pass
        need += max(size - min(have, size), 0)
    return need


def staging_revisions(variants):
    """The distinct ``{'repo_id', 'revision'}`` of the variants the hosts picked (each a variant, or the result of
    inkling_variant with one under ``variant``; anything else is skipped), in order: what the controller asks the
    hub for once, however many hosts stage each."""
    out = []
    for item in variants or []:
        variant = item.get('variant', item) if isinstance(item, dict) else None
        model = (variant or {}).get('model') if isinstance(variant, dict) else None
        if not isinstance(model, dict) or not model.get('repo_id') or not model.get('revision'):
            continue
        key = {'repo_id': model['repo_id'], 'revision': model['revision']}
        if key not in out:
            out.append(key)
    return out


def staging_files_for(results, variant):
    """The hub's file list (``[{'etag', 'size'}]``) of the variant's revision among the controller's answers (the
    results of a hf_hub_files loop over staging_revisions), or None when it was not read (not asked, or failed)."""
    model = (variant or {}).get('model') or {} if isinstance(variant, dict) else {}
    for res in results or []:
        item = (res or {}).get('item') or {}
        if item.get('repo_id') == model.get('repo_id') and item.get('revision') == model.get('revision'):
            if res.get('failed') or not isinstance(res.get('files'), list):
                return None
            return [{'etag': f.get('etag'), 'size': f.get('size')} for f in res['files'] if isinstance(f, dict)]
    return None


def bytes_needed(rdir, entries):
    """Bytes still to write for entries: their sizes minus partial .incomplete files kept for resume."""
    need = 0
    for e in entries:
        have = 0
        try:
            have = os.path.getsize(incomplete_path(rdir, e.etag))
        except OSError:
            pass
        need += max(e.size - min(have, e.size), 0)
    return need


def space_check(path, need, margin_pct, host='this host'):
    """Return (ok, message, details)."""
    avail = free_bytes(path)
    want = staging_need(need, margin_pct)
    details = {'free_bytes': avail, 'needed_bytes': need, 'needed_with_margin_bytes': want,
               'margin_pct': margin_pct, 'filesystem_path': existing_ancestor(path)}
    if need == 0 or avail >= want:
        return True, None, details
    msg = ('%s: not enough free space in %s to stage the snapshot: need %s + %s%% margin = %s, %s free. '
           'Remedy: free or add space on that filesystem, point hf_cache_dir elsewhere, or narrow '
           'hf_cache_allow_patterns.' % (host, details['filesystem_path'], human_bytes(need), margin_pct,
                                         human_bytes(want), human_bytes(avail)))
    return False, msg, details


# --------------------------------------------------------------------------
# ownership and modes
# --------------------------------------------------------------------------

def dir_mode_for(file_mode):
    """Directory mode from a file mode: add x wherever r is set (0644 -> 0755, 0640 -> 0750)."""
    mode = file_mode
    for r, x in ((0o400, 0o100), (0o040, 0o010), (0o004, 0o001)):
        if mode & r:
            mode |= x
    return mode


def apply_ownership(rdir, commit, uid, gid, file_mode):
    """chown/chmod the repo tree the service reads (blobs, refs, this snapshot). Returns changed count.

    Links are left as they are (their mode is meaningless); lchown keeps their owner consistent.
    """
    dmode = dir_mode_for(file_mode)
    changed = 0
    targets = [rdir, os.path.join(rdir, 'blobs'), os.path.join(rdir, 'refs'),
               os.path.join(rdir, 'snapshots'), os.path.join(rdir, 'snapshots', commit)]
    walk_roots = [os.path.join(rdir, 'blobs'), os.path.join(rdir, 'refs'), os.path.join(rdir, 'snapshots', commit)]
    seen = set()
    for root in walk_roots:
        for base, dirs, files in os.walk(root):
            for d in dirs:
                targets.append(os.path.join(base, d))
            for f in files:
                targets.append(os.path.join(base, f))
    for p in targets:
        if p in seen or not os.path.lexists(p):
            continue
        seen.add(p)
        st = os.lstat(p)
        if os.path.islink(p):
            if (uid is not None and st.st_uid != uid) or (gid is not None and st.st_gid != gid):
                os.lchown(p, -1 if uid is None else uid, -1 if gid is None else gid)
                changed += 1
            continue
        if p.endswith('.incomplete'):
            continue
        want = dmode if os.path.isdir(p) else file_mode
        if (uid is not None and st.st_uid != uid) or (gid is not None and st.st_gid != gid):
            os.chown(p, -1 if uid is None else uid, -1 if gid is None else gid)
            changed += 1
        if (st.st_mode & 0o7777) != want:
            os.chmod(p, want)
            changed += 1
    return changed


def resolve_owner(owner, group):
    """(uid, gid) for hf_cache_owner/hf_cache_group (names or numbers); None keeps the current one."""
    import grp  # pylint: disable=import-outside-toplevel
    import pwd  # pylint: disable=import-outside-toplevel
    uid = gid = None
    try:
        if owner not in (None, ''):
            uid = int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid
        if group not in (None, ''):
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise HfCacheError('unknown user or group %s for hf_cache_owner/hf_cache_group' % exc)
    return uid, gid


def parse_mode(mode):
    try:
        return int(mode, 8)
    except (TypeError, ValueError):
        raise HfCacheError('mode %r is not an octal string' % (mode,))


def ensure_directory(path, uid=None, gid=None, mode=None, check_mode=False):
    """Make ``path`` a directory with this owner, group and mode, as ansible.builtin.file state=directory does.

    Missing directories (the parents too) are created and each one created gets uid, gid and mode; an
    existing one gets them where they differ. None keeps the current value (a new directory: this
    process's owner and the umask's mode). Symbolic links are followed. In check mode nothing changes.
    Returns ``(changes, before, after)``: what changed or would change (``['created']``, or a subset of
    ``owner``, ``group``, ``mode``, in that order) and the path's state before and after
    (``path``, ``state``: absent or directory, and for a directory ``owner``, ``group`` (numeric ids)
    and ``mode`` (an octal string)), as the file module's diff shows them.
    Raises HfCacheError when the path or one of its parents is not a directory.
    """
    def state(st):
        return {'path': path, 'state': 'directory', 'owner': st.st_uid, 'group': st.st_gid,
                'mode': '%04o' % (st.st_mode & 0o7777)}

    path = os.path.abspath(path)
    missing = []
    probe = path
    while not os.path.exists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise HfCacheError('%s is not a directory (it is in the way of %s)' % (probe, path))
    if missing:
        umask = os.umask(0)
        os.umask(umask)
        before = {'path': path, 'state': 'absent'}
        after = {'path': path, 'state': 'directory',
                 'owner': os.geteuid() if uid is None else uid, 'group': os.getegid() if gid is None else gid,
                 'mode': '%04o' % ((0o777 & ~umask) if mode is None else mode)}
        changes = ['created']
        if not check_mode:
            for d in reversed(missing):
                os.mkdir(d)
                if uid is not None or gid is not None:
                    os.chown(d, -1 if uid is None else uid, -1 if gid is None else gid)
                if mode is not None:
                    os.chmod(d, mode)
            after = state(os.stat(path))
        return changes, before, after
    st = os.stat(path)
    before = state(st)
    after = dict(before)
    changes = []
    if uid is not None and st.st_uid != uid:
        changes.append('owner')
        after['owner'] = uid
    if gid is not None and st.st_gid != gid:
        changes.append('group')
        after['group'] = gid
    if mode is not None and (st.st_mode & 0o7777) != mode:
        changes.append('mode')
        after['mode'] = '%04o' % mode
    if changes and not check_mode:
        if 'owner' in changes or 'group' in changes:
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        if 'mode' in changes:
            os.chmod(path, mode)
        after = state(os.stat(path))
    return changes, before, after


def commit_snapshot(rdir, repo_id, commit, requested, entries, stats, allow_patterns, ignore_patterns, uid, gid, file_mode,
                    old_manifest=None):
    """Record a snapshot whose files were verified: refs, ownership and modes, the manifest, and the
    completion marker last. Drops the plan and the downloader's record. Returns True when it changed
    anything. Shared by hf_snapshot (phase=finalize) and hf_peer_copy."""
    changed = write_ref(rdir, requested, commit)
    changed |= apply_ownership(rdir, commit, uid, gid, file_mode) > 0
    stats = dict(stats)
    for e in entries:  # refresh after chown/chmod (ctime only) and link repairs
        stats[e.etag] = stat_key(blob_path(rdir, e.etag))
    manifest = build_manifest(repo_id, commit, requested, entries, stats, allow_patterns, ignore_patterns)
    old = old_manifest or {}
    same = (old.get('files') == manifest['files'] and old.get('patterns') == manifest['patterns'])
    if not same or not os.path.exists(marker_path(rdir, commit)):
        write_json_atomic(manifest_path(rdir, commit), manifest, mode=0o644)
        write_marker(rdir, commit)
        changed = True
    for leftover in (plan_path(rdir, commit), hashed_path(rdir, commit)):
        if os.path.exists(leftover):
            os.unlink(leftover)
    sd = state_dir(rdir)
    os.chmod(sd, 0o755)
    for name in os.listdir(sd):
        fp = os.path.join(sd, name)
        if name.endswith('.json') or name.endswith('.complete'):
            if (os.stat(fp).st_mode & 0o777) != 0o644:
                os.chmod(fp, 0o644)
    return changed


# --------------------------------------------------------------------------
# this host's address (source=peer)
# --------------------------------------------------------------------------

ROUTE_PROBE = '8.8.8.8'


def default_route_address(probe=ROUTE_PROBE, socket_factory=None):
    """The IPv4 source address of this host's route to ``probe``: with the default route, the address
    Ansible's fact ``ansible_default_ipv4.address`` holds (it reads ``ip -4 route get 8.8.8.8``).

    Connecting a UDP socket only picks the route and the source address: no packet is sent and the
    probe need not be reachable. '' when there is no route (no default route) or no source address.
    ``socket_factory`` (tests) replaces ``socket.socket``.
    """
    factory = socket_factory or socket.socket
    try:
        sock = factory(socket.AF_INET, socket.SOCK_DGRAM)
    except (IOError, OSError):
        return ''
    try:
        sock.connect((probe, 53))
        address = sock.getsockname()[0]
    except (IOError, OSError):
        return ''
    finally:
        sock.close()
    return '' if address in (None, '', '0.0.0.0') else address


def _dist_key(name):
    """A distribution name as installers normalise it in a .dist-info folder's name (PEP 503, then '_')."""
    return re.sub(r'[-_.]+', '_', name).lower()


_PYTHON_NAME = re.compile(r'^(?:platform-)?python(3\.\d+)(t?)$')


def venv_site_packages(venv):
    """``(site_packages, problem)`` of the virtual environment ``venv``.

    Its Python version is the one ``pyvenv.cfg`` names (``version = 3.11.2``, or virtualenv's
    ``version_info = 3.11.2.final.0``), which must be the version of the python ``bin/python`` resolves to
    (``python3.11``), or, where that name carries none (a copied binary), one ``home`` still holds:
    a venv whose base python changed (a release upgrade: ``/usr/bin/python3`` is 3.13 now) or was removed
    cannot run what it holds, whatever its site-packages says. ``problem`` says so ('' otherwise).
    ``site_packages`` is None when there is no python (no venv yet), when its version cannot be told (no
    pyvenv.cfg and a name without it: pip decides), or with a problem (also: no site-packages for it)."""
    python = os.path.join(venv, 'bin', 'python')
    if os.path.islink(python) and not os.path.exists(python):
        return None, 'its python %s is a link to %s, which is gone' % (python, os.readlink(python))
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return None, ''
    real = os.path.realpath(python)
    named = _PYTHON_NAME.match(os.path.basename(real))
    try:
        with open(os.path.join(venv, 'pyvenv.cfg'), encoding='utf-8', errors='replace') as f:
            cfg = f.read()
    except (IOError, OSError):
        cfg = ''
    made = re.search(r'^\s*version(?:_info)?\s*=\s*(3\.\d+)', cfg, re.M)
    home = re.search(r'^\s*home\s*=\s*(.*?)\s*$', cfg, re.M)
    if made:
        version = made.group(1)
        if named and named.group(1) != version:
            return None, ('its python %s is Python %s, but it was made with Python %s (pyvenv.cfg): the base python '
                          'changed' % (real, named.group(1), version))
        if not named and home and not any(os.path.exists(os.path.join(home.group(1), prefix + version + t))
                                          for prefix in ('python', 'platform-python') for t in ('', 't')):
            return None, ('it was made with Python %s (pyvenv.cfg), which %s no longer holds'
                          % (version, home.group(1)))
    elif named:
        version = named.group(1)
    else:
        return None, ''
    suffix = named.group(2) if named else ''
    for folder in ('python%s%s' % (version, suffix), 'python%s' % version):
        site = os.path.join(venv, 'lib', folder, 'site-packages')
        if os.path.isdir(site):
            return site, ''
    return None, 'it has no lib/python%s%s/site-packages for its Python %s' % (version, suffix, version)


def venv_distribution(venv, name):
    """The distribution ``name`` installed in the virtual environment ``venv``, read from its
    ``.dist-info/METADATA`` without running that environment's python: ``{'version', 'problem'}``.

    ``version`` is '' when ``venv`` has no python that can run what it holds (see venv_site_packages),
    when ``name`` is not installed there, or when two installations of it are (an interrupted upgrade,
    which pip does not repair); ``problem`` says why the environment cannot be used as it is ('' when it
    can, also when ``name`` is simply missing: installing it is the remedy then)."""
    site, problem = venv_site_packages(venv)
    if site is None:
        return {'version': '', 'problem': problem}
    want = _dist_key(name)
    versions = []
    try:
        entries = sorted(os.listdir(site))
    except (IOError, OSError) as exc:
        return {'version': '', 'problem': 'cannot read %s: %s' % (site, exc)}
    for entry in entries:
        stem = entry[:-len('.dist-info')] if entry.endswith('.dist-info') else None
        if not stem or '-' not in stem or _dist_key(stem.rsplit('-', 1)[0]) != want:
            continue
        try:
            with open(os.path.join(site, entry, 'METADATA'), encoding='utf-8', errors='replace') as f:
                m = re.search(r'^Version:\s*(\S+)\s*$', f.read(), re.M)
        except (IOError, OSError):
            continue                # a folder without METADATA is not an installation
        versions.append(m.group(1) if m else stem.rsplit('-', 1)[1])
    if len(versions) > 1:
        return {'version': '', 'problem': 'it holds %d installations of %s (%s) in %s'
                                          % (len(versions), name, ', '.join(versions), site)}
    return {'version': versions[0] if versions else '', 'problem': ''}


# --------------------------------------------------------------------------
# progress file (hf_download, hf_peer_copy; read by hf_progress and hf_wait)
# --------------------------------------------------------------------------

class Progress(object):
    """Counts bytes and writes the progress JSON every ``interval`` seconds from a thread.

    Bytes done are the finished files plus the file being fetched (``current``: (FileEntry,
    function returning the paths to watch)), or what ``measure()`` returns when given.
    """

    def __init__(self, path, files_total, bytes_total, interval, measure=None, extra=None):
        self.path = path
        self.interval = interval
        self.measure = measure
        self.extra = dict(extra or {})
        self.lock = threading.Lock()
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.finished_bytes = 0
        self.files_done = 0
        self.current = None          # (FileEntry, function returning the paths to watch) or None
        self.retries = 0
        self.state = 'running'
        self.error = None
        self.started = time.time()
        self.resumed = 0
        self.samples = []            # (time, bytes_done) for the rate
        self.last_growth = time.time()
        self.last_done = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.daemon = True

    def current_bytes(self):
        cur = self.current
        if not cur:
            return 0
        entry, watch = cur[0], cur[1]
        size = 0
        for p in watch():
            try:
                size = max(size, os.path.getsize(p))
            except OSError:
                pass
        return min(size, entry.size)

    def done_bytes(self):
        if self.measure is not None:
            try:
                return min(self.measure(), self.bytes_total)
            except (IOError, OSError):
                return max(self.last_done, 0)
        return self.finished_bytes + self.current_bytes()

    def snapshot(self):
        with self.lock:
            done = self.done_bytes()
            now = time.time()
            if done != self.last_done:
                self.last_growth = now
                self.last_done = done
            self.samples.append((now, done))
            self.samples = [s for s in self.samples if now - s[0] <= 30] or [(now, done)]
            t0, b0 = self.samples[0]
            rate = (done - b0) / (now - t0) if now > t0 else 0.0
            left = self.bytes_total - done
            data = dict(self.extra)
            data.update({
                'state': self.state, 'error': self.error,
                'bytes_total': self.bytes_total, 'bytes_done': done, 'bytes_resumed': self.resumed,
                'rate_bps': int(rate), 'eta_s': int(left / rate) if rate > 0 else None,
                'files_total': self.files_total, 'files_done': self.files_done,
                'current_file': self.current[0].path if self.current else None,
                'retries': self.retries, 'started': int(self.started), 'updated': int(now),
                'seconds_since_progress': int(now - self.last_growth), 'pid': os.getpid(),
            })
            return data

    def write(self):
        write_json_atomic(self.path, self.snapshot(), mode=0o644)

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                self.write()
            except Exception:  # pylint: disable=broad-except
                pass

    def start(self):
        self.write()
        self._thread.start()

    def stop(self, state, error=None):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with self.lock:
            self.state = state
            self.error = error
            self.current = None
        self.write()


# --------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------

def human_bytes(n):
    n = float(n)
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(n) < 1024 or unit == 'TiB':
            return ('%d %s' % (n, unit)) if unit == 'B' else ('%.1f %s' % (n, unit))
        n /= 1024.0
    return '%.1f TiB' % n


def human_duration(seconds):
    if seconds is None:
        return '?'
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return '%d:%02d:%02d' % (h, m, s)


def progress_message(progress):
    """One line for the operator from a progress dict (hf_download, hf_peer_copy)."""
    if progress.get('state') == 'waiting':
        return 'waiting for %s to hold a verified snapshot%s (%s so far)' % (
            progress.get('source') or 'a peer',
            (', and for %s, which it serves first' % progress['after']) if progress.get('after') else '',
            # the host's own clock (updated is written with every look): read on the controller too
            human_duration(int(progress.get('updated') or time.time()) - int(progress.get('started') or time.time())))
    total = progress.get('bytes_total') or 0
    if progress.get('state') == 'failed' and not total and progress.get('error'):
        return '[failed]: %s' % progress['error']
    done = progress.get('bytes_done') or 0
    pct = (100.0 * done / total) if total else 100.0
    rate = progress.get('rate_bps') or 0
    eta = progress.get('eta_s')
    msg = '%s of %s (%.1f%%), %s/s, %s left, file %d/%d' % (
        human_bytes(done), human_bytes(total), pct, human_bytes(rate), human_duration(eta),
        progress.get('files_done', 0), progress.get('files_total', 0))
    if progress.get('retries'):
        msg += ', %d retries' % progress['retries']
    state = progress.get('state')
    if state and state != 'running':
        msg += ' [%s]' % state
    if progress.get('error'):
        msg += ': %s' % progress['error']
    if progress.get('source'):
        msg = 'from %s: %s' % (progress['source'], msg)
    return msg


# The options of inkling.fleet.hf_prune (its DOCUMENTATION describes them).
PRUNE_ARGUMENT_SPEC = dict(
    cache_dir=dict(type='path', required=True),
    repo_id=dict(type='str', required=True),
    keep=dict(type='list', elements='str', required=True),
)
