# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""nofollow: the descriptor-based file operations root-side code uses in directories a
container can write. Each test plants what a hostile container would."""

import os

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import nofollow


@pytest.fixture
def top(tmp_path):
    (tmp_path / 'set').mkdir()
    (tmp_path / 'outside').mkdir()
    (tmp_path / 'outside' / 'secret').write_text('host file')
    fd = nofollow.open_dir(str(tmp_path / 'set'))
    yield tmp_path, fd
    os.close(fd)


def test_make_dirs_refuses_a_link_in_the_path(top):
    tmp_path, fd = top
    os.symlink(str(tmp_path / 'outside'), str(tmp_path / 'set' / 'vllm'))
    with pytest.raises(nofollow.LinkRefused) as exc:
        nofollow.make_dirs('vllm/a/b', fd, shown_top='/set')
    assert '/set/vllm is a symbolic link where a directory is expected' in str(exc.value)
    assert os.listdir(str(tmp_path / 'outside')) == ['secret']


def test_make_dirs_refuses_dot_dot(top):
    dummy, fd = top
    with pytest.raises(OSError):
        nofollow.make_dirs('vllm/../../x', fd)


def test_remove_tree_removes_links_as_themselves(top):
    tmp_path, fd = top
    (tmp_path / 'set' / 'd' / 'e').mkdir(parents=True)
    os.symlink(str(tmp_path / 'outside'), str(tmp_path / 'set' / 'd' / 'e' / 'to-dir'))
    os.symlink(str(tmp_path / 'outside' / 'secret'), str(tmp_path / 'set' / 'd' / 'to-file'))
    nofollow.remove_tree_at('d', fd)
    nofollow.remove_tree_at('absent', fd)
    assert os.listdir(str(tmp_path / 'set')) == []
    assert (tmp_path / 'outside' / 'secret').read_text() == 'host file'
    os.symlink(str(tmp_path / 'outside'), str(tmp_path / 'set' / 'link'))
    nofollow.remove_tree_at('link', fd)
    assert os.listdir(str(tmp_path / 'outside')) == ['secret']


def test_walk_reports_a_directory_link_as_itself_and_skips_fifos_without_blocking(top):
    tmp_path, fd = top
    (tmp_path / 'set' / 'a').mkdir()
    (tmp_path / 'set' / 'a' / 'f').write_bytes(b'abc')
    os.symlink(str(tmp_path / 'outside'), str(tmp_path / 'set' / 'a' / 'l'))
    os.mkfifo(str(tmp_path / 'set' / 'a' / 'p'))
    seen = {}
    for rel, parent, name, st in nofollow.walk_files(fd):
        rfd = nofollow.open_regular(name, parent)
        seen[rel] = None if rfd is None else nofollow.sha256_fd(rfd)[0]
        if rfd is not None:
            os.close(rfd)
    assert seen == {'a/f': 3, 'a/l': None, 'a/p': None}
    assert nofollow.has_files(fd)


def test_write_atomic_never_writes_through_a_link(top):
    tmp_path, fd = top
    os.symlink(str(tmp_path / 'outside' / 'secret'), str(tmp_path / 'set' / 'key.json'))
    nofollow.write_atomic('key.json', fd, b'{}\n', 0o640)
    assert (tmp_path / 'outside' / 'secret').read_text() == 'host file'
    assert not os.path.islink(str(tmp_path / 'set' / 'key.json'))
    assert oct(os.stat(str(tmp_path / 'set' / 'key.json')).st_mode & 0o777) == '0o640'
    assert nofollow.read_small('key.json', fd) == b'{}\n'
    os.symlink(str(tmp_path / 'outside' / 'secret'), str(tmp_path / 'set' / 'other'))
    assert nofollow.read_small('other', fd) is None
