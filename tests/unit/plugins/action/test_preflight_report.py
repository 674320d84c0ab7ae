# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""preflight_report writes the report as the file + copy tasks it replaces did: the directory 0700 (made with
its parents, or its mode set), the report 0600, a link at the report's path replaced, never followed."""

import os
import stat

import pytest

from ansible_collections.inkling.fleet.plugins.action import preflight_report as pr


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_makes_the_directory_and_its_parents_0700_and_writes_the_report_0600(tmp_path):
    directory = tmp_path / 'a' / 'reports'
    path, changed = pr.write_report(str(directory), 'gpu-01', '{"ok": true}\n')
    assert changed and path == str(directory / 'gpu-01.json')
    assert (directory / 'gpu-01.json').read_text() == '{"ok": true}\n'
    assert (mode(directory), mode(tmp_path / 'a'), mode(path)) == (0o700, 0o700, 0o600)
    # a second run: the same directory, a new report, no change
    path, changed = pr.write_report(str(directory), 'gpu-01', '{"ok": false}\n')
    assert not changed and (directory / 'gpu-01.json').read_text() == '{"ok": false}\n'
    assert os.listdir(str(directory)) == ['gpu-01.json']


def test_sets_an_existing_directory_s_mode(tmp_path):
    directory = tmp_path / 'reports'
    directory.mkdir(mode=0o755)
    os.chmod(str(directory), 0o755)
    _path, changed = pr.write_report(str(directory), 'gpu-01', '{}\n')
    assert changed and mode(directory) == 0o700


def test_a_link_at_the_report_s_path_is_replaced_not_followed(tmp_path):
    directory = tmp_path / 'reports'
    directory.mkdir(mode=0o700)
    target = tmp_path / 'elsewhere'
    target.write_text('keep')
    (directory / 'gpu-01.json').symlink_to(target)
    pr.write_report(str(directory), 'gpu-01', '{}\n')
    assert target.read_text() == 'keep'
    assert not os.path.islink(str(directory / 'gpu-01.json'))


def test_a_file_in_place_of_the_directory_is_refused(tmp_path):
    (tmp_path / 'reports').write_text('')
    with pytest.raises(pr.ReportError, match='is not a directory'):
        pr.write_report(str(tmp_path / 'reports' / 'sub'), 'gpu-01', '{}\n')
    with pytest.raises(pr.ReportError, match='not a host name'):
        pr.write_report(str(tmp_path / 'r'), '../gpu-01', '{}\n')


def test_a_directory_another_fork_makes_at_the_same_moment_is_no_error(tmp_path, monkeypatch):
    # Stop 51's CI: two hosts' forks wrote their first reports at once; the second one's mkdir met the
    # directory the first had just made ("[Errno 17] File exists").
    from ansible_collections.inkling.fleet.plugins.plugin_utils import controller_files
    target = tmp_path / 'state' / 'reports'
    real_mkdir = os.mkdir

    def racing_mkdir(path, mode=0o777):
        if path == str(tmp_path / 'state') and not os.path.exists(path):
            real_mkdir(path, 0o700)         # the other fork, just before this one
        return real_mkdir(path, mode)
    monkeypatch.setattr(controller_files.os, 'mkdir', racing_mkdir)
    path, changed = pr.write_report(str(target), "gpu-01", "{}")
    assert changed is True and os.path.isfile(path)
    assert oct(os.stat(str(target)).st_mode & 0o777) == '0o700'
