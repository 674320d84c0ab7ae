# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Warm restarts: the compile cache key, cache manifests and seeding checks, cache pruning and
the page-cache warm-up decision. Pure functions (docs/warm-restarts.md); the modules
compile_cache and page_cache_warm and the filter plugin warm_cache call them; ``make_set`` (which
creates a set) also service_host.

A compile cache set lives in ``<cache_root>/<variant>/<digest hex>/`` (the service role's
layout, one subdirectory per cache: vllm/, triton/, ...). Its key is written next to the
subdirectories in ``KEY_FILE``; a set is only ever copied to a host whose key is identical.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import hashlib
import json
import os
import re
import stat

from ansible_collections.inkling.fleet.plugins.module_utils import nofollow

KEY_FILE = 'inkling-cache-key.json'
# Files of the collection itself inside a cache set: never part of a manifest.
OWN_FILES = (KEY_FILE,)
KEY_FIELDS = ('variant', 'image_digest', 'gpu_model', 'gpu_count', 'driver_version', 'tensor_parallel_size')
DIGEST_RE = re.compile(r'^sha256:[0-9a-f]{64}$')
HEX64_RE = re.compile(r'^[0-9a-f]{64}$')
GIB = 1024 ** 3


class KeyError_(ValueError):
    """An input of the cache key is missing or malformed."""


def cache_key(variant, image_digest, gpu_model, gpu_count, driver_version, tensor_parallel_size):
    """The compile cache key of one host: every input that decides whether kernels compiled on
    one host are valid on another. Returns the fields and ``id``, a 16-hex digest of them.
    Raises KeyError_ naming the bad input."""
    problems = []
    variant = str(variant or '').strip()
    image_digest = str(image_digest or '').strip()
    gpu_model = str(gpu_model or '').strip()
    driver_version = str(driver_version or '').strip()
    if not variant:
        problems.append('variant is empty')
    if not DIGEST_RE.match(image_digest):
        problems.append('image_digest %r is not sha256:<64 hex>' % image_digest)
    if not gpu_model:
        problems.append('gpu_model is empty')
    if not driver_version:
        problems.append('driver_version is empty')
    counts = {}
    for name, value in (('gpu_count', gpu_count), ('tensor_parallel_size', tensor_parallel_size)):
        try:
            counts[name] = int(value)
            if counts[name] < 1 or str(value).strip() != str(counts[name]):
                raise ValueError()
        except (TypeError, ValueError):
            problems.append('%s %r is not a positive integer' % (name, value))
    if problems:
        raise KeyError_('; '.join(problems))
    fields = {'variant': variant, 'image_digest': image_digest, 'gpu_model': gpu_model,
              'gpu_count': counts['gpu_count'], 'driver_version': driver_version,
              'tensor_parallel_size': counts['tensor_parallel_size']}
    fields['id'] = key_id(fields)
    return fields


def key_id(fields):
    """16 hex of the SHA-256 of the key fields in canonical JSON (the fields only, not ``id``)."""
    canon = json.dumps(dict((k, fields[k]) for k in KEY_FIELDS), sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(canon.encode('utf-8')).hexdigest()[:16]


def key_from_facts(deployment, gpu):
    """The key of a host from its deployment contract (variant, image_digest, tensor_parallel_size)
    and its preflight GPU facts (driver_version, gpu_count, gpus[].name). A host with GPUs of
    several models gets all of them, sorted, in gpu_model (it matches only a host alike)."""
    deployment = deployment or {}
    gpu = gpu or {}
    names = sorted(set(str(g.get('name') or '').strip() for g in (gpu.get('gpus') or []) if g.get('name')))
    return cache_key(deployment.get('variant'), deployment.get('image_digest'), ' + '.join(names),
                     gpu.get('gpu_count'), gpu.get('driver_version'), deployment.get('tensor_parallel_size'))


def seed_source(host, key, seeds, order):
    """The host to copy caches from: the first host in ``order`` other than ``host`` whose
    published seed (``seeds``: host -> {'key': {...}, ...}) has exactly the same key id and
    fields. None when there is none (the host starts cold)."""
    for other in order:
        seed = seeds.get(other)
        if other == host or not seed:
            continue
        other_key = seed.get('key') or {}
        if other_key.get('id') == key.get('id') and all(other_key.get(f) == key.get(f) for f in KEY_FIELDS):
            return other
    return None


def seed_table(seeds, order):
    """The seeds published so far, read once per batch on the controller: ``{'order': [the hosts in
    ``order`` that published a seed], 'seeds': {host: its seed}}`` (``seeds``: host -> published seed, empty
    or missing when it published none). ``seed_source(host, key, table['seeds'], table['order'])`` is then
    ``seed_source(host, key, seeds, order)``, looking only at the hosts that published (a few per key), not
    at the whole play."""
    seeds = seeds or {}
    hosts = [h for h in order if seeds.get(h)]
    return {'order': hosts, 'seeds': dict((h, seeds[h]) for h in hosts)}


def build_manifest(cache_dir, subdirs):
    """Every regular file under ``cache_dir/<subdir>`` for the given subdirectories, sorted:
    [{'path': 'vllm/x', 'size': n, 'sha256': hex}], and the links and special files left out
    (a cache needs none; a link could point outside the set). The set is written by the
    container: nothing is followed (nofollow.walk_files), a subdirectory that is a link is left
    out as itself, and each file's size and hash come from one descriptor opened without
    following a link."""
    files, left_out = [], []
    with nofollow.opened_dir(cache_dir) as top:
        for sub in sorted(subdirs):
            try:
                sub_fd = nofollow.open_dir(sub, dir_fd=top, shown=sub)
            except nofollow.LinkRefused:
                left_out.append(sub)
                continue
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue
                raise
            try:
                for rel, parent, name, st in nofollow.walk_files(sub_fd, sub + '/'):
                    fd = nofollow.open_regular(name, parent) if st is not None and stat.S_ISREG(st.st_mode) else None
                    if fd is None:
                        left_out.append(rel)
                        continue
                    try:
                        size, digest = nofollow.sha256_fd(fd)
                    finally:
                        os.close(fd)
                    files.append({'path': rel, 'size': size, 'sha256': digest})
            finally:
                os.close(sub_fd)
    return files, left_out


def check_manifest(manifest, subdirs):
    """Problems of a manifest received from the controller: paths must be relative, normalised,
    inside one of the cache subdirectories; sizes non-negative; sha256 64 hex."""
    problems = []
    for entry in manifest or []:
        path = str(entry.get('path', ''))
        norm = os.path.normpath(path)
        if not path or os.path.isabs(path) or norm != path or norm.startswith('..') \
                or norm.split('/', 1)[0] not in subdirs or '/' not in norm:
            problems.append('path %r is not inside a cache subdirectory' % path)
        if not HEX64_RE.match(str(entry.get('sha256', ''))):
            problems.append('%s: sha256 %r is not 64 hex' % (path, entry.get('sha256')))
        if not isinstance(entry.get('size'), int) or entry['size'] < 0:
            problems.append('%s: size %r is not a non-negative integer' % (path, entry.get('size')))
    return problems


def set_is_empty(cache_dir, subdirs):
    """True when none of the cache subdirectories holds a file (a cold set). A link counts as
    content, and nothing is followed."""
    with nofollow.opened_dir(cache_dir) as top:
        for sub in subdirs:
            if not nofollow.lexists(sub, top):
                continue
            try:
                fd = nofollow.open_dir(sub, dir_fd=top, shown=sub)
            except nofollow.LinkRefused:
                return False
            try:
                if nofollow.has_files(fd):
                    return False
            finally:
                os.close(fd)
    return True


class NotUnderRoot(ValueError):
    """A cache set that is not below the cache root it was given with."""


def fix_dir(fd):
    """Owner root:root and mode 0750 on an open directory; True when something was changed."""
    st = os.fstat(fd)
    if (st.st_mode & 0o7777) == 0o750 and st.st_uid == 0 and st.st_gid == 0:
        return False
    os.fchown(fd, 0, 0)
    os.fchmod(fd, 0o750)
    return True


def make_set(cache_dir, subdirs, cache_root=None, check_mode=False):
    """The set ``cache_dir``, its subdirectories and the directories above it up to ``cache_root``:
    root-owned, 0750. Returns (created, fixed) paths; in check mode what would be. Inside the set, which
    the container writes, nothing is followed (a subdirectory that is a link: nofollow.LinkRefused)."""
    paths = []
    if cache_root:
        root = os.path.normpath(cache_root)
        rel = os.path.relpath(os.path.normpath(cache_dir), root)
        if rel.startswith('..'):
            raise NotUnderRoot('%s is not under cache_root %s' % (cache_dir, root))
        paths.append(root)
        for part in rel.split(os.sep):
            paths.append(os.path.join(paths[-1], part))
    else:
        paths.append(cache_dir)
    created, fixed = [], []
    # Down to the set: directories the container cannot reach (the set is what it mounts).
    for path in paths:
        if not os.path.isdir(path):
            created.append(path)
            if not check_mode:
                os.mkdir(path, 0o750)
                os.chown(path, 0, 0)
                os.chmod(path, 0o750)
            continue
        st = os.stat(path)
        if (st.st_mode & 0o7777) != 0o750 or st.st_uid != 0 or st.st_gid != 0:
            fixed.append(path)
            if not check_mode:
                os.chown(path, 0, 0)
                os.chmod(path, 0o750)
    # Inside the set, written by the container: never through a link.
    subs = [os.path.join(cache_dir, sub) for sub in subdirs]
    if check_mode and not os.path.isdir(cache_dir):
        return created + subs, fixed
    with nofollow.opened_dir(cache_dir) as top:
        for sub, path in zip(subdirs, subs):
            if check_mode:
                if not nofollow.lexists(sub, top):
                    created.append(path)
                    continue
                with nofollow.opened_dir(sub, dir_fd=top, shown=path) as fd:
                    st = os.fstat(fd)
                if (st.st_mode & 0o7777) != 0o750 or st.st_uid != 0 or st.st_gid != 0:
                    fixed.append(path)
                continue
            fd, new = nofollow.make_dir(sub, top, 0o750, shown=path)
            try:
                if fix_dir(fd) or new:
                    (created if new else fixed).append(path)
            finally:
                os.close(fd)
    return created, fixed


def prune_plan(present, keep):
    """Cache sets to remove: ``present`` and ``keep`` are lists of [variant, digest hex]. Every
    set not kept goes; with nothing to keep (unknown running and rollback sets) nothing goes."""
    keep = set(tuple(k) for k in keep if k and all(k))
    if not keep:
        return []
    return sorted(list(p) for p in set(tuple(p) for p in present) if p not in keep)


def parse_meminfo(text):
    """/proc/meminfo -> {field: bytes}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(':'):
            try:
                value = int(parts[1])
            except ValueError:
                continue
            unit = parts[2].lower() if len(parts) > 2 else ''
            out[parts[0][:-1]] = value * 1024 if unit == 'kb' else value
    return out


def warm_margin(mem_total, margin_pct, min_margin_gib):
    """Memory kept free while warming: margin_pct of MemTotal, at least min_margin_gib."""
    return int(max(mem_total * float(margin_pct) / 100.0, float(min_margin_gib) * GIB))


def warm_decision(mem_available, mem_total, snapshot_bytes, margin_pct, min_margin_gib):
    """Whether to read the snapshot into the page cache before the old server stops. Warm only
    when MemAvailable minus the margin holds the whole snapshot, so the page cache it fills
    is reclaimable without pushing the running server into swap or the OOM killer.
    Returns {'warm': bool, 'reason': str, 'margin_bytes': n, 'room_bytes': n}."""
    margin = warm_margin(mem_total, margin_pct, min_margin_gib)
    room = int(mem_available) - margin
    out = {'margin_bytes': margin, 'room_bytes': room}
    if snapshot_bytes <= 0:
        out.update(warm=False, reason='no shards to warm')
    elif room < snapshot_bytes:
        out.update(warm=False, reason='not enough memory: MemAvailable %.1f GiB minus margin %.1f GiB < snapshot %.1f GiB'
                   % (mem_available / float(GIB), margin / float(GIB), snapshot_bytes / float(GIB)))
    else:
        out.update(warm=True, reason='MemAvailable %.1f GiB minus margin %.1f GiB >= snapshot %.1f GiB'
                   % (mem_available / float(GIB), margin / float(GIB), snapshot_bytes / float(GIB)))
    return out


def keep_reading(mem_available, margin_bytes):
    """Checked while warming: stop as soon as MemAvailable falls to the margin."""
    return int(mem_available) > int(margin_bytes)


def read_sequentially(files, step, mem_available, margin_bytes):
    """Read ``files`` ([(path, size)]) start to end in chunks of at most ``step`` bytes, calling
    ``mem_available()`` after every ``step`` bytes and stopping as soon as it falls to the margin.
    Returns (bytes read, None or why it stopped)."""
    buf = bytearray(min(16 * 1024 * 1024, max(1, step)))
    view = memoryview(buf)
    done, since_check = 0, 0
    for path, dummy_size in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            if hasattr(os, 'posix_fadvise'):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while True:
                n = os.readv(fd, [view])
                if not n:
                    break
                done += n
                since_check += n
                if since_check >= step:
                    since_check = 0
                    avail = mem_available()
                    if not keep_reading(avail, margin_bytes):
                        return done, ('stopped after %d bytes: MemAvailable fell to %d bytes, the margin is %d'
                                      % (done, avail, margin_bytes))
        finally:
            os.close(fd)
    return done, None


# The options of inkling.fleet.page_cache_warm (its DOCUMENTATION describes them).
PAGE_CACHE_WARM_ARGUMENT_SPEC = dict(
    cache_dir=dict(type='path', required=True),
    repo_id=dict(type='str', required=True),
    revision=dict(type='str', required=True),
    margin_pct=dict(type='float', default=10),
    min_margin_gib=dict(type='float', default=4),
    check_every_mib=dict(type='int', default=1024),
    meminfo_path=dict(type='path', default='/proc/meminfo'),
)
