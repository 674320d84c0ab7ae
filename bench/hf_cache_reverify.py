#!/usr/bin/env python3
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Re-run verification of a staged snapshot made of large sparse files: seconds, not a re-hash.

Controller-local, no containers and no hub. In a temporary directory (``--dir``) it builds a
hub cache for a fake repository (``bench/Sparse-NVFP4`` at a fixed commit) holding ``--files``
shards of ``--file-gib`` GiB each (default 4 x 50 GiB = 200 GiB apparent size), plus
``config.json`` and ``model.safetensors.index.json`` naming the shards. Each shard is a sparse
hole followed by a 1 MiB random tail, so it takes almost no disk while every shard has its own
content and sha256 (hole first, so that the hash of the zero prefix is computed once here and
shared by the shards). The directory holds blobs, relative snapshot links and a *shipped*
manifest (``.inkling/COMMIT.json``, written with module_utils' ``build_manifest``) without a
completion marker: what ``source: path`` or a peer hands over.

Then the real ``inkling.fleet.hf_snapshot`` module is run through Ansible against localhost,
each step timed from the outside (Ansible start-up included):

1. first staging: ``phase=plan metadata_source=manifest`` (hashes every blob), then
   ``phase=finalize`` (writes our manifest and the completion marker);
2. re-run: ``phase=plan local_only=true`` (what roles/hf_cache/tasks/check.yml runs): links,
   sizes and (size, mtime, inode) against the manifest; must report ``complete=true`` and
   ``hashed_files=0``;
3. with ``--rehash``: ``phase=plan local_only=true rehash=true`` (full re-hash on request).

It also times ``quick_verify`` from module_utils in this process, and ``ansible -m ping``, to
separate Ansible's start-up from the check itself. The target: the re-run verification takes
at most ``--target-s`` seconds and reads no content. The tree is removed at the end unless
``--keep``.
"""

from __future__ import absolute_import, division, print_function

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# `make setup` links this checkout as collections/ansible_collections/inkling/fleet
sys.path.insert(0, os.path.join(REPO, 'collections'))
from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc  # noqa: E402 pylint: disable=wrong-import-position

REPO_ID = 'bench/Sparse-NVFP4'
COMMIT = '5b1e0c2a9d8f7e6b5a4c3d2e1f0a9b8c7d6e5f40'
TAIL = 1024 * 1024
GIB = 1024 ** 3
ZERO = bytes(TAIL)


def env():
    e = dict(os.environ)
    e['PATH'] = os.path.join(REPO, '.venv', 'bin') + os.pathsep + e.get('PATH', '')
    e['ANSIBLE_LOAD_CALLBACK_PLUGINS'] = '1'
    e['ANSIBLE_STDOUT_CALLBACK'] = 'json'
    return e


def python():
    venv = os.path.join(REPO, '.venv', 'bin', 'python')
    return venv if os.path.exists(venv) else sys.executable


def ansible(module, args=None):
    """Run one module on localhost through Ansible; return (seconds, result dict)."""
    cmd = ['ansible', 'localhost', '-i', 'localhost,', '-c', 'local',
           '-e', 'ansible_python_interpreter=%s' % python(), '-m', module]
    if args is not None:
        cmd += ['-a', json.dumps(args)]
    print('+ ' + ' '.join(cmd), file=sys.stderr)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, check=False)
    dt = time.time() - t0
    try:
        res = json.loads(proc.stdout)['plays'][0]['tasks'][0]['hosts']['localhost']
    except (ValueError, KeyError, IndexError):
        sys.exit('ansible failed (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    if proc.returncode != 0 or res.get('failed'):
        sys.exit('%s failed: %s' % (module, res.get('msg')))
    return dt, res


def snapshot(cache, **extra):
    args = {'repo_id': REPO_ID, 'revision': COMMIT, 'cache_dir': cache}
    args.update(extra)
    return ansible('inkling.fleet.hf_snapshot', args)


def zero_prefix_hasher(n):
    """sha256 state after n zero bytes (n a multiple of TAIL), computed without reading."""
    h = hashlib.sha256()
    for dummy in range(n // TAIL):  # pylint: disable=unused-variable
        h.update(ZERO)
    return h


def place(rdir, entry, write):
    """Write blob for entry with write(path) and link it from the snapshot, as the hub cache does."""
    bp = hc.blob_path(rdir, entry.etag)
    os.rename(write, bp)
    link = hc.link_path(rdir, COMMIT, entry.path)
    if not os.path.isdir(os.path.dirname(link)):
        os.makedirs(os.path.dirname(link))
    os.symlink(hc.link_target(rdir, COMMIT, entry.path, entry.etag), link)


def build(cache, files, file_gib):
    """Build the shipped snapshot; return (repo dir, entries)."""
    rdir = hc.repo_dir(cache, REPO_ID)
    os.makedirs(os.path.join(rdir, 'blobs'))
    os.makedirs(os.path.join(rdir, 'refs'))
    size = int(file_gib * GIB) // TAIL * TAIL
    if size < TAIL:
        sys.exit('--file-gib must be at least 1 MiB')
    t0 = time.time()
    base = zero_prefix_hasher(size - TAIL)
    print('hashed the shared %s zero prefix in %.1f s' % (hc.human_bytes(size - TAIL), time.time() - t0),
          file=sys.stderr)
    entries, stats = [], {}
    shards = ['model-%05d-of-%05d.safetensors' % (i + 1, files) for i in range(files)]
    for name in shards:
        tail = os.urandom(TAIL)
        h = base.copy()
        h.update(tail)
        tmp = os.path.join(rdir, 'blobs', 'tmp.' + name)
        with open(tmp, 'wb') as f:
            f.truncate(size - TAIL)
            f.seek(size - TAIL)
            f.write(tail)
        st = os.stat(tmp)
        if st.st_blocks * 512 > size // 2 and size > 64 * TAIL:
            sys.exit('%s does not keep sparse files (%s on disk for %s); use --dir elsewhere'
                     % (cache, hc.human_bytes(st.st_blocks * 512), hc.human_bytes(size)))
        e = hc.FileEntry(name, size, h.hexdigest(), True)
        place(rdir, e, tmp)
        entries.append(e)
    small = {
        'config.json': json.dumps({'architectures': ['InklingForCausalLM'], 'model_type': 'inkling',
                                   'quantization_config': {'quant_method': 'nvfp4'}}, indent=2).encode(),
        hc.SAFETENSORS_INDEX: json.dumps({'metadata': {'total_size': size * files},
                                          'weight_map': dict(('layers.%d.weight' % i, n)
                                                             for i, n in enumerate(shards))}, indent=2).encode(),
    }
    for name, data in sorted(small.items()):
        e = hc.FileEntry(name, len(data), hc.git_blob_sha1_bytes(data), False)
        tmp = os.path.join(rdir, 'blobs', 'tmp.' + name)
        with open(tmp, 'wb') as f:
            f.write(data)
        place(rdir, e, tmp)
        entries.append(e)
    entries.sort(key=lambda x: x.path)
    for e in entries:
        stats[e.etag] = hc.stat_key(hc.blob_path(rdir, e.etag))
    with open(os.path.join(rdir, 'refs', 'main'), 'w') as f:
        f.write(COMMIT)
    # the shipped manifest, as the source wrote it; no completion marker (the receiver must verify)
    hc.write_json_atomic(hc.manifest_path(rdir, COMMIT),
                         hc.build_manifest(REPO_ID, COMMIT, 'main', entries, stats, None, None))
    return rdir, entries


def on_disk(path):
    total = 0
    for base, _dirs, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(base, n))
            total += st.st_blocks * 512
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    ap.add_argument('--dir', default='/var/tmp', help='where the temporary hub cache is made (default /var/tmp)')
    ap.add_argument('--files', type=int, default=4, help='number of large shards (default 4)')
    ap.add_argument('--file-gib', type=float, default=50, help='apparent size of each shard in GiB (default 50)')
    ap.add_argument('--rehash', action='store_true', help='also time a full re-hash (rehash=true): as long as step 1')
    ap.add_argument('--target-s', type=float, default=5.0, help='target for the re-run verification (default 5 s)')
    ap.add_argument('--keep', action='store_true', help='keep the temporary tree')
    ap.add_argument('--quick', action='store_true',
                    help='2 shards of 256 MiB (what CI runs: the same steps and checks, seconds)')
    a = ap.parse_args()
    if a.quick:
        a.files, a.file_gib = 2, 0.25

    if not os.path.isdir(a.dir):
        os.makedirs(a.dir)
    need = (a.files + 64) * TAIL
    if hc.free_bytes(a.dir) < need + GIB:
        sys.exit('%s: less than %s free' % (a.dir, hc.human_bytes(need + GIB)))
    top = tempfile.mkdtemp(prefix='inkling-reverify-', dir=a.dir)
    cache = os.path.join(top, 'hub')
    rows = []
    try:
        t0 = time.time()
        rdir, entries = build(cache, a.files, a.file_gib)
        t_build = time.time() - t0
        apparent = sum(e.size for e in entries)

        t_ping = ansible('ping')[0]

        t_plan, plan = snapshot(cache, phase='plan', metadata_source='manifest')
        rows.append(('first staging: plan, metadata_source=manifest', t_plan, plan))
        t_fin, fin = snapshot(cache, phase='finalize')
        rows.append(('first staging: finalize', t_fin, fin))
        if not fin.get('complete'):
            sys.exit('finalize did not mark the snapshot complete: %s' % fin.get('msg'))

        t_re, rerun = snapshot(cache, phase='plan', local_only=True)
        rows.append(('re-run: plan, local_only=true', t_re, rerun))

        man = hc.load_manifest(rdir, COMMIT)
        t0 = time.time()
        qv = hc.quick_verify(rdir, COMMIT, man)
        t_qv = time.time() - t0

        if a.rehash:
            t_rh, rh = snapshot(cache, phase='plan', local_only=True, rehash=True)
            rows.append(('re-run: plan, local_only=true, rehash=true', t_rh, rh))

        print()
        print('snapshot %s@%s: %d files (%d shards of %s + %d small), %s apparent (%.0f GB), %s on disk'
              % (REPO_ID, COMMIT[:12], len(entries), a.files, hc.human_bytes(max(e.size for e in entries)),
                 len(entries) - a.files, hc.human_bytes(apparent), apparent / 1e9, hc.human_bytes(on_disk(top))))
        print('%-46s %9s %8s %9s %s' % ('step', 'time (s)', 'hashed', 'complete', 'GB/s hashed'))
        for label, dt, res in rows:
            hashed = res.get('hashed_files', 0)
            rate = '%.2f' % (apparent / 1e9 / dt) if hashed == len(entries) else ('-' if not hashed else '?')
            print('%-46s %9.2f %8d %9s %s' % (label, dt, hashed, res.get('complete'), rate))
        print('%-46s %9.4f %8d %9s' % ('in-process quick_verify (module_utils)', t_qv, len(qv['hashed']),
                                       not qv['problems']))
        print('%-46s %9.2f' % ('ansible start-up (ansible -m ping)', t_ping))
        print('%-46s %9.2f' % ('build the shipped snapshot (this script)', t_build))
        ok_time = t_re <= a.target_s
        ok_read = rerun.get('hashed_files') == 0 and not qv['hashed']
        ok_done = bool(rerun.get('complete'))
        print('target: re-run verification <= %.0f s: %.2f s %s; no content read (hashed_files == 0): %s; '
              'complete: %s' % (a.target_s, t_re, 'PASS' if ok_time else 'FAIL', 'PASS' if ok_read else 'FAIL',
                                'PASS' if ok_done else 'FAIL'))
        if a.quick:  # CI checks that the benchmark runs and reads no content; a time is not a test there
            print('quick mode: the time is reported, not judged')
            ok_time = True
        return 0 if ok_time and ok_read and ok_done else 1
    finally:
        if a.keep:
            print('kept %s' % top, file=sys.stderr)
        else:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
