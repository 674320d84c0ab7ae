# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""File operations that never follow a symbolic link, for root-side code working in a directory
that a container can write (a compile cache set is mounted read-write into the vLLM container,
which runs model code). Every path below a trusted top directory is reached through directory
file descriptors opened with ``O_NOFOLLOW``, so a link planted by the container, or swapped in
between a check and a use, is refused (where a directory is expected) or handled as the link
itself (removed, left out), never as what it points to. docs/security.md lists the threat.

The functions take and return plain file descriptors; callers close what they open with
``os.close``, or use ``opened_dir`` as a context manager.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import contextlib
import errno
import hashlib
import os
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)


class LinkRefused(OSError):
    """A link, or something other than a directory, where a directory is expected."""

    def __init__(self, path, what):
        OSError.__init__(self, errno.ELOOP, '%s is %s where a directory is expected: refusing to follow it. '
                         'Remedy: remove it (a container that can write the directory planted it; '
                         'treat the host as suspect)' % (path, what), path)
        self.path = path
        self.what = what


def _kind(mode):
    if stat.S_ISLNK(mode):
        return 'a symbolic link'
    if stat.S_ISREG(mode):
        return 'a file'
    return 'a special file'


def open_dir(path, dir_fd=None, shown=None):
    """A descriptor of the directory ``path`` (relative to ``dir_fd`` when given), opened without
    following a link in its last component. Raises LinkRefused for a link or a non-directory,
    OSError(ENOENT) when it does not exist."""
    try:
        return os.open(path, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            st = os.lstat(path, dir_fd=dir_fd)
            raise LinkRefused(shown or path, _kind(st.st_mode))
        raise


@contextlib.contextmanager
def opened_dir(path, dir_fd=None, shown=None):
    fd = open_dir(path, dir_fd=dir_fd, shown=shown)
    try:
        yield fd
    finally:
        os.close(fd)


def lexists(name, dir_fd):
    try:
        os.lstat(name, dir_fd=dir_fd)
        return True
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise


def make_dir(name, dir_fd, mode=0o750, shown=None):
    """Create the directory ``name`` in ``dir_fd`` when it is absent, and return a descriptor of it
    (opened without following a link). (fd, created)."""
    created = False
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
        created = True
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    return open_dir(name, dir_fd=dir_fd, shown=shown), created


def make_dirs(rel, dir_fd, mode=0o750, shown_top=''):
    """Every directory of the relative path ``rel`` below ``dir_fd``, created as needed, none of
    them a link. Returns a descriptor of the last one (the caller closes it)."""
    fd = os.dup(dir_fd)
    shown = shown_top
    try:
        for part in [p for p in rel.split('/') if p]:
            if part in ('.', '..'):
                raise OSError(errno.EINVAL, 'path component %r refused' % part, rel)
            shown = os.path.join(shown, part) if shown else part
            nfd, dummy = make_dir(part, fd, mode, shown=shown)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def remove_tree_at(name, dir_fd):
    """Remove ``name`` in ``dir_fd``: a directory with everything below it, a link or a file as
    itself. Never follows a link. Nothing there is not an error."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return
        raise
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = open_dir(name, dir_fd=dir_fd)
    try:
        empty_dir(fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def empty_dir(fd):
    """Remove everything inside the directory ``fd``; links are removed, not followed."""
    for entry in list(os.scandir(fd)):
        remove_tree_at(entry.name, fd)


def walk_files(fd, prefix=''):
    """Every entry below the directory ``fd``, depth first and sorted, as (relative path, parent
    descriptor, name, lstat result) for everything that is not a directory. Directories are
    entered through descriptors opened without following links; a link to a directory is
    reported as itself. The parent descriptor is valid only during the iteration step."""
    names = sorted(e.name for e in os.scandir(fd))
    for name in names:
        try:
            st = os.lstat(name, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # removed meanwhile
                continue
            raise
        rel = prefix + name
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = open_dir(name, dir_fd=fd)
            except (LinkRefused, OSError):  # swapped for a link or removed meanwhile
                yield rel, fd, name, None
                continue
            try:
                yield from walk_files(sub, rel + '/')
            finally:
                os.close(sub)
        else:
            yield rel, fd, name, st


def has_files(fd):
    """True when anything other than a directory is below ``fd`` (a link counts)."""
    for dummy in walk_files(fd):
        return True
    return False


def open_regular(name, dir_fd):
    """A descriptor of the regular file ``name`` in ``dir_fd``, opened without following a link and
    without blocking on a FIFO; None when it is a link or not a regular file."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.ENOENT, errno.EISDIR):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_small(name, dir_fd, limit=1024 * 1024):
    """The bytes of a regular file (at most ``limit``), or None for a link, a non-file or an
    absent file."""
    fd = open_regular(name, dir_fd)
    if fd is None:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def sha256_fd(fd, bufsize=1024 * 1024):
    """(size, hex SHA-256) of an open file, read from its start."""
    h = hashlib.sha256()
    size = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, bufsize)
        if not chunk:
            break
        h.update(chunk)
        size += len(chunk)
    return size, h.hexdigest()


def write_atomic(name, dir_fd, data, mode=0o640):
    """Write ``data`` (bytes) to ``name`` in ``dir_fd``: a new temporary file created exclusively
    (``O_EXCL | O_NOFOLLOW``, so a planted link is never written through), then renamed over
    ``name`` (which replaces a link there, never its target)."""
    tmp = '.%s.tmp.%d.%s' % (name, os.getpid(), os.urandom(4).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0),
                 mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
