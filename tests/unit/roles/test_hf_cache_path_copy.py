# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The hf_cache role's copy for source=path (roles/hf_cache/tasks/stage_path.yml), its rsync command
templated from the task file and the role's vars and run on a hub cache folder: the copy ships the
source's manifest (.inkling/COMMIT.json), so that copy_verify.yml verifies it without asking the hub,
and leaves the source's marker, plan, progress, locks and partial files behind. The peer daemon's
list (rsyncd.conf.j2) hides every dot file: the two lists differ on purpose."""

import os
import subprocess

import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from inkling_test_helpers import needs_program

pytestmark = needs_program('rsync')

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(REPO, 'roles', 'hf_cache')
COMMIT = 'c' * 40
FOLDER = 'models--org--name'
ETAG = 'e' * 64

SOURCE_FILES = {
    'blobs/' + ETAG: 'weights',
    'refs/main': COMMIT,
    '.inkling/%s.json' % COMMIT: '{"revision": "%s"}' % COMMIT,      # the manifest: copied
}
LEFT_BEHIND = [
    'blobs/%s.incomplete' % ('f' * 64),
    '.inkling/%s.complete' % COMMIT,
    '.inkling/%s.plan.json' % COMMIT,
    '.inkling/%s.hashed.json' % COMMIT,
    '.inkling/%s.progress.json' % COMMIT,
    '.locks/%s/x.lock' % FOLDER,
]


def role_vars():
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as f:
        return yaml.safe_load(f)


def copy_argv(src_root, dest_root):
    """The argv of the task 'Copy the repository folder from ...', templated as Ansible does."""
    with open(os.path.join(ROLE, 'tasks', 'stage_path.yml')) as f:
        task = yaml.safe_load(f)[0]
    variables = dict(role_vars(), hf_cache_source_path=src_root, __hf_cache_repo_folder=FOLDER,
                     __hf_cache_repo_dir=os.path.join(dest_root, FOLDER))
    return Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(task['ansible.builtin.command']['argv']))


def write_source(root):
    for rel in list(SOURCE_FILES) + LEFT_BEHIND:
        path = os.path.join(root, FOLDER, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(SOURCE_FILES.get(rel, 'x'))
    snap = os.path.join(root, FOLDER, 'snapshots', COMMIT)
    os.makedirs(snap)
    os.symlink('../../blobs/' + ETAG, os.path.join(snap, 'model.safetensors'))


def test_path_copy_ships_the_manifest_and_leaves_the_source_state(tmp_path):
    src, dest = str(tmp_path / 'mnt'), str(tmp_path / 'cache')
    write_source(src)
    os.makedirs(os.path.join(dest, FOLDER))
    argv = copy_argv(src, dest)
    assert argv[:3] == ['rsync', '-a', '--partial']
    subprocess.run(argv, check=True)
    copied = os.path.join(dest, FOLDER)
    for rel, text in SOURCE_FILES.items():
        with open(os.path.join(copied, rel)) as f:
            assert f.read() == text, rel
    assert os.readlink(os.path.join(copied, 'snapshots', COMMIT, 'model.safetensors')) == '../../blobs/' + ETAG
    assert [rel for rel in LEFT_BEHIND if os.path.lexists(os.path.join(copied, rel))] == []


def test_the_peer_daemon_hides_every_dot_file(tmp_path):
    """The daemon's list (its exclude line) lets peers see blobs, snapshots and refs only: no manifest either."""
    with open(os.path.join(ROLE, 'templates', 'rsyncd.conf.j2')) as f:
        assert "exclude = {{ __hf_cache_rsyncd_excludes | join(' ') }}" in f.read()
    src, dest = str(tmp_path / 'cache'), str(tmp_path / 'peer')
    write_source(src)
    excludes = ['--exclude=%s' % e for e in role_vars()['__hf_cache_rsyncd_excludes']]
    subprocess.run(['rsync', '-a'] + excludes + [src + '/', dest + '/'], check=True)
    seen = sorted(os.path.relpath(os.path.join(d, n), os.path.join(dest, FOLDER))
                  for d, dummy, names in os.walk(dest) for n in names)
    assert seen == sorted(['blobs/' + ETAG, 'refs/main', 'snapshots/%s/model.safetensors' % COMMIT])
