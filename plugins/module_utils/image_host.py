# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The image role's files on the host and its prune, in one module run (inkling.fleet.image_prune).

In the role's order: the registry auth file (its directory, then the root-only file), the registries.conf
drop-in for site mirrors (written, or removed when no mirror is configured), the prune of old images (the
rules of ``image_ref.select_prune``), then the pin record (its directory, then the file). Each file is
reported as the builtin modules report it (``file``, ``copy``, ``template``): changed only when its content,
mode or owner differ, and a diff entry in --diff mode (never one for the auth file: it holds credentials).

The content of the two JSON files is what the role wrote before with ``to_nice_json(indent=2)`` and a
final newline, byte for byte (``nice_json``), so that a host written by either is left unchanged.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import base64
import json
import os
import tempfile

from ansible_collections.inkling.fleet.plugins.module_utils.image_ref import ImageRefError, select_prune, validate_digest


class ImageHostError(Exception):
    """A step that could not be done; ``done`` says what the run changed before it."""


def nice_json(data):
    """``data`` as Ansible's ``to_nice_json(indent=2)`` writes it, with a final newline."""
    return json.dumps(data, indent=2, sort_keys=True, separators=(',', ': ')) + '\n'


def auth_content(registries):
    """The containers-auth.json of ``registries`` (``registry``, ``username``, ``password`` each); a registry
    given twice keeps its last credential."""
    auths = {}
    for cred in registries:
        pair = ('%s:%s' % (cred['username'], cred['password'])).encode('utf-8')
        auths[cred['registry']] = {'auth': base64.b64encode(pair).decode('ascii')}
    return nice_json({'auths': auths})


def check_prune_args(keep, digests):
    """Problems with the prune arguments, as image_prune words them ('' when none)."""
    if keep < 1:
        return 'image: keep must be at least 1 (the target image), got %d' % keep
    try:
        for digest in digests:
            if digest:
                validate_digest(digest)
    except ImageRefError as exc:
        return 'image: %s' % exc
    return ''


class ImageHostConfig(object):
    """Applies one run's wishes through ``module`` (an AnsibleModule: check mode, diff mode, file attributes,
    commands). ``changed``, ``diff`` and ``report`` collect what was (or, in check mode, would be) done."""

    def __init__(self, module, owner='root', group='root'):
        self.module = module
        self.owner = owner
        self.group = group
        self.check = module.check_mode
        self.changed = False
        self.diff = []
        self.report = {}

    # ------------------------------------------------------------------ files

    def _attributes(self, path, mode, diff):
        """Mode and owner of an existing ``path`` (reported in ``diff`` as the file module does)."""
        args = self.module.load_file_common_arguments({'mode': mode, 'owner': self.owner, 'group': self.group},
                                                      path=path)
        return self.module.set_fs_attributes_if_different(args, False, diff=diff)

    def _note(self, changed, diff):
        self.changed = self.changed or changed
        if changed and self.module._diff and diff:
            self.diff.append(diff)
        return changed

    def ensure_dir(self, path, mode='0755'):
        """A directory at ``path`` (and its missing parents) with ``mode``, owned by owner:group."""
        path = path.rstrip('/') or '/'
        if os.path.isdir(path):
            diff = {'before': {'path': path}, 'after': {'path': path}}
            return self._note(self._attributes(path, mode, diff), diff)
        if os.path.lexists(path):
            raise ImageHostError('%s exists and is not a directory' % path)
        diff = {'before': {'path': path, 'state': 'absent'}, 'after': {'path': path, 'state': 'directory'}}
        if not self.check:
            missing = []
            cur = path
            while cur and cur != '/' and not os.path.isdir(cur):
                missing.insert(0, cur)
                cur = os.path.dirname(cur)
            for item in missing:
                os.mkdir(item, int(mode, 8))
                self._attributes(item, mode, None)
        return self._note(True, diff)

    def write_file(self, path, content, mode, show_diff=True):
        """``content`` (text) in ``path`` with ``mode``, written atomically; the content is shown in the diff
        only with ``show_diff``."""
        before = None
        if os.path.lexists(path):
            if os.path.isdir(path):
                raise ImageHostError('%s is a directory, not a file' % path)
            with open(path, 'rb') as handle:
                before = handle.read().decode('utf-8', 'replace')
        elif not os.path.isdir(os.path.dirname(path) or '/') and not self.check:
            raise ImageHostError('the directory of %s does not exist' % path)
        diff = {'before_header': path, 'after_header': path, 'before': before or '', 'after': content}
        changed = before != content
        if changed and not self.check:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.%s.' % os.path.basename(path))
            try:
                with os.fdopen(fd, 'wb') as handle:
                    handle.write(content.encode('utf-8'))
                self._attributes(tmp, mode, None)
                os.rename(tmp, path)
            except (IOError, OSError):
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        elif not changed:
            diff = {'before': {'path': path}, 'after': {'path': path}}
            changed = self._attributes(path, mode, diff)
            return self._note(changed, diff)
        return self._note(changed, diff if show_diff else None)

    def remove_file(self, path):
        if not os.path.lexists(path):
            return False
        if os.path.isdir(path) and not os.path.islink(path):
            raise ImageHostError('%s is a directory, not the drop-in file' % path)
        if not self.check:
            os.unlink(path)
        return self._note(True, {'before': {'path': path, 'state': 'file'}, 'after': {'path': path, 'state': 'absent'}})

    # ------------------------------------------------------------------ the steps

    def auth_file(self, path, registries):
        changed = self.ensure_dir(os.path.dirname(path))
        changed = self.write_file(path, auth_content(registries), '0600', show_diff=False) or changed
        self.report['auth_file'] = {'path': path, 'changed': changed}

    def mirror_dropin(self, path, content):
        if content:
            changed = self.write_file(path, content, '0644')
        else:
            changed = self.remove_file(path)
        self.report['mirror_dropin'] = {'path': path, 'state': 'file' if content else 'absent', 'changed': changed}

    def record(self, path, record):
        changed = self.ensure_dir(os.path.dirname(path))
        changed = self.write_file(path, nice_json(record), '0644') or changed
        self.report['record'] = {'path': path, 'changed': changed}

    def prune(self, executable, repositories, keep, target_digest=None, protect=()):
        """image_prune's run: old images of ``repositories`` removed (listed in check mode)."""
        images = self._podman_json(executable, ['images', '--format', 'json'])
        containers = self._podman_json(executable, ['ps', '--all', '--format', 'json'])
        remove, kept = select_prune(images, repositories, keep, target_digest=target_digest or None,
                                    in_use_ids=[c.get('ImageID') for c in containers],
                                    protect_digests=[d for d in protect if d])
        self.report.update(removed=remove, kept=kept)
        if remove and not self.check:
            for image in remove:
                rc, dummy, err = self.module.run_command([executable, 'rmi', image['id']])
                if rc != 0:
                    self.report['removed'] = remove[:remove.index(image)]
                    raise ImageHostError('image: could not remove old image %s (%s): %s'
                                         % (image['id'][:12], ', '.join(image['names']), err.strip()))
        self.changed = self.changed or bool(remove)

    def _podman_json(self, executable, args):
        rc, out, err = self.module.run_command([executable] + args)
        if rc != 0:
            raise ImageHostError('image: `podman %s` failed (rc=%d): %s' % (' '.join(args), rc, err.strip()))
        try:
            return json.loads(out or '[]') or []
        except ValueError as exc:
            raise ImageHostError('image: cannot parse the JSON of `podman %s`: %s' % (' '.join(args), exc))
