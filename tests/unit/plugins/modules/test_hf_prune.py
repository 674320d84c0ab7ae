# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""hf_prune run as Ansible runs it, on a hub cache laid out as huggingface_hub and the hf_cache role lay it out
(blobs/, snapshots/COMMIT/ links, refs/, .inkling/ manifests and markers): after two upgrades a host holds
exactly the revision it serves and the rollback target (issue 37), and nothing outside is followed."""

import hashlib
import json
import os

from inkling_test_helpers import run_module

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc

REPO_ID = 'thinkingmachines/Inkling-NVFP4'
A, B, C = ('a' * 40), ('b' * 40), ('c' * 40)
# each revision's files: config changes every time, one shard is shared by A and B, one by B and C
CONTENT = {
    A: {'config.json': b'{"v": 1}', 'model-1.safetensors': b'shard-1' * 100, 'model-2.safetensors': b'shard-2a' * 90},
    B: {'config.json': b'{"v": 2}', 'model-1.safetensors': b'shard-1' * 100, 'model-2.safetensors': b'shard-2b' * 80},
    C: {'config.json': b'{"v": 3}', 'model-1.safetensors': b'shard-1c' * 70, 'model-2.safetensors': b'shard-2b' * 80},
}


def etag(data):
    return hashlib.sha256(data).hexdigest()


def stage(cache, commit, ref=None):
    """What staging leaves for one commit: its blobs, its links, its manifest and marker, a ref."""
    rdir = hc.repo_dir(str(cache), REPO_ID)
    files = []
    for rel, data in CONTENT[commit].items():
        blob = hc.blob_path(rdir, etag(data))
        os.makedirs(os.path.dirname(blob), exist_ok=True)
        with open(blob, 'wb') as f:
            f.write(data)
        link = hc.link_path(rdir, commit, rel)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.lexists(link):
            os.symlink(hc.link_target(rdir, commit, rel, etag(data)), link)
        files.append({'path': rel, 'size': len(data), 'etag': etag(data), 'lfs': True})
    os.makedirs(hc.state_dir(rdir), exist_ok=True)
    with open(hc.manifest_path(rdir, commit), 'w') as f:
        json.dump({'version': 1, 'repo_id': REPO_ID, 'revision': commit, 'files': files}, f)
    open(hc.marker_path(rdir, commit), 'w').close()
    if ref:
        hc.write_ref(rdir, ref, commit)
    return rdir


def held(rdir):
    """(revisions, blob names, refs) the folder holds."""
    snaps = sorted(os.listdir(os.path.join(rdir, 'snapshots')))
    blobs = sorted(os.listdir(os.path.join(rdir, 'blobs')))
    refs = {}
    for name in (os.listdir(os.path.join(rdir, 'refs')) if os.path.isdir(os.path.join(rdir, 'refs')) else []):
        with open(os.path.join(rdir, 'refs', name)) as f:
            refs[name] = f.read().strip()
    return snaps, blobs, refs


def blobs_of(*commits):
    return sorted(set(etag(d) for c in commits for d in CONTENT[c].values()))


def prune(tmp_path, cache, keep, check_mode=False):
    return run_module('hf_prune', {'cache_dir': str(cache), 'repo_id': REPO_ID, 'keep': keep,
                                   '_ansible_diff': True}, tmp_path=tmp_path, check_mode=check_mode)


def test_after_two_upgrades_the_host_holds_the_served_revision_and_the_rollback_target(tmp_path):
    cache = tmp_path / 'hub'
    rdir = stage(cache, A, ref='v1')
    # upgrade 1: A -> B; the rollout prunes once B passed its gate, keeping B and the rollback target A
    stage(cache, B, ref='main')
    rc, res = prune(tmp_path, cache, [B, A])
    assert rc == 0 and res['changed'] is False and res['removed_revisions'] == [], res
    assert held(rdir)[0] == [A, B]
    # upgrade 2: B -> C; A is neither served nor the rollback target any more
    stage(cache, C, ref='main')
    rc, res = prune(tmp_path, cache, [C, B])
    assert rc == 0 and res['changed'] is True, res
    assert res['removed_revisions'] == [A] and res['kept'] == [B, C]
    only_a = sorted(set(blobs_of(A)) - set(blobs_of(B, C)))
    assert res['removed_blobs'] == len(only_a) == 2          # A's config and A's second shard
    assert res['freed_bytes'] == sum(len(d) for d in CONTENT[A].values()
                                     if etag(d) in only_a)
    snaps, blobs, refs = held(rdir)
    assert snaps == [B, C] and blobs == blobs_of(B, C)       # the shard A shared with B stays
    assert refs == {'main': C}                               # v1 named A: gone with it
    state = sorted(os.listdir(hc.state_dir(rdir)))
    assert not [n for n in state if n.startswith(A)] and B + '.complete' in state and C + '.json' in state
    # the kept revisions are still whole: every link resolves to its blob
    for commit in (B, C):
        for rel, data in CONTENT[commit].items():
            with open(hc.link_path(rdir, commit, rel), 'rb') as f:
                assert f.read() == data
    # a second run finds nothing to do
    rc, res = prune(tmp_path, cache, [C, B])
    assert rc == 0 and res['changed'] is False and res['msg'].startswith('nothing to remove'), res


def test_check_mode_previews_and_changes_nothing(tmp_path):
    cache = tmp_path / 'hub'
    for commit in (A, B, C):
        rdir = stage(cache, commit)
    before = held(rdir), sorted(os.listdir(hc.state_dir(rdir)))
    rc, res = prune(tmp_path, cache, [C, B], check_mode=True)
    assert rc == 0 and res['changed'] is True and res['removed_revisions'] == [A]
    assert res['msg'].startswith('would remove 1 revision(s) aaaaaaaaaaaa, 2 blob(s)'), res['msg']
    assert res['diff']['before'] == '%s\n%s\n%s\n' % (A, B, C) and res['diff']['after'] == '%s\n%s\n' % (B, C)
    assert (held(rdir), sorted(os.listdir(hc.state_dir(rdir)))) == before


def test_a_blob_only_a_kept_manifest_lists_is_kept_even_without_its_link(tmp_path):
    # a kept snapshot being repaired (a link missing) keeps its blob: the manifest says it is used
    cache = tmp_path / 'hub'
    stage(cache, A)
    rdir = stage(cache, C)
    os.unlink(hc.link_path(rdir, C, 'config.json'))
    rc, res = prune(tmp_path, cache, [C])
    assert rc == 0 and res['removed_revisions'] == [A]
    assert held(rdir)[1] == blobs_of(C)


def test_nothing_outside_the_folder_is_followed_or_removed(tmp_path):
    cache = tmp_path / 'hub'
    stage(cache, A)
    rdir = stage(cache, C)
    outside = tmp_path / 'outside'
    outside.mkdir()
    (outside / 'precious').write_text('host file')
    # a link inside a removed snapshot to a host folder, a blob that is a link, a snapshot folder that is a link
    os.symlink(str(outside), hc.link_path(rdir, A, 'escape'))
    os.symlink(str(outside / 'precious'), hc.blob_path(rdir, 'f' * 64))
    os.symlink(str(outside), os.path.join(rdir, 'snapshots', 'd' * 40))
    rc, res = prune(tmp_path, cache, [C])
    assert rc == 0 and res['removed_revisions'] == [A], res
    assert (outside / 'precious').read_text() == 'host file'
    assert os.path.islink(hc.blob_path(rdir, 'f' * 64))
    assert os.path.islink(os.path.join(rdir, 'snapshots', 'd' * 40))


def test_without_a_commit_to_keep_nothing_is_removed(tmp_path):
    cache = tmp_path / 'hub'
    rdir = stage(cache, A)
    before = held(rdir)
    rc, res = prune(tmp_path, cache, ['', 'main'])
    assert rc != 0 and res['failed'] is True
    assert 'no commit to keep' in res['msg'] and 'Remedy: pass the served commit' in res['msg']
    assert held(rdir) == before
