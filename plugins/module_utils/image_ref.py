# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Container image references for inkling.fleet: parsing, validation, pinning
and the choice of images to prune.

Pure functions, unit-tested without Ansible (tests/unit/plugins/module_utils/
test_image_ref.py). The grammar follows the distribution reference grammar
(github.com/distribution/reference): ``[host[:port]/]path[:tag][@digest]``.

Only fully qualified references are accepted (field failure F12 of docs/field-failures.md: podman cannot
resolve a short name without a TTY when short-name-mode is enforcing, and a
name resolved through ``unqualified-search-registries`` is not reproducible).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
from collections import namedtuple

DIGEST_RE = re.compile(r'^sha256:[0-9a-f]{64}$')
_HOST_COMPONENT = r'(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])'
_HOST_RE = re.compile(r'^(?:%s(?:\.%s)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$' % (_HOST_COMPONENT, _HOST_COMPONENT))
_PATH_COMPONENT_RE = re.compile(r'^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$')
_TAG_RE = re.compile(r'^[\w][\w.-]{0,127}$')

EXAMPLE = 'registry.example.com/vllm/vllm-openai@sha256:<64 hex>'


class ImageRefError(ValueError):
    """A reference or digest that cannot be used; the message names what was
    found, what is expected and the remedy."""


class ImageRef(namedtuple('ImageRef', ['registry', 'path', 'tag', 'digest'])):
    """A parsed, fully qualified image reference."""

    __slots__ = ()

    @property
    def repository(self):
        """``registry/path``, without tag or digest."""
        return '%s/%s' % (self.registry, self.path)

    def pinned(self, digest=None):
        """``repository@digest`` for ``digest`` (default: the reference's own)."""
        digest = digest or self.digest
        if not digest:
            raise ImageRefError('%s carries no digest to pin' % (self,))
        validate_digest(digest)
        return '%s@%s' % (self.repository, digest)

    def tagged(self):
        """``repository:tag`` (``latest`` when the reference has no tag)."""
        return '%s:%s' % (self.repository, self.tag or 'latest')

    def __str__(self):
        text = self.repository
        if self.tag:
            text += ':' + self.tag
        if self.digest:
            text += '@' + self.digest
        return text


def validate_digest(digest, what='digest'):
    """Return ``digest`` if it is ``sha256:`` and 64 lowercase hex digits."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ImageRefError(
            '%s %r is not a sha256 digest; expected "sha256:" followed by 64 lowercase hex '
            'digits (the Docker-Content-Digest of the manifest, e.g. from '
            '`skopeo inspect --format "{{.Digest}}" docker://REF`)' % (what, digest))
    return digest


def is_registry_host(component):
    """True if the first path component names a registry (docker's rule: it
    contains a dot or a port, or is ``localhost``)."""
    return (component == 'localhost' or '.' in component or ':' in component
            or component.startswith('[')) and bool(_HOST_RE.match(component))


def parse_reference(reference, what='image reference'):
    """Parse a fully qualified reference into an :class:`ImageRef`.

    Raises :class:`ImageRefError` for short names (F12), bad tags, bad digests
    and malformed repository paths.
    """
    if not isinstance(reference, str) or not reference.strip():
        raise ImageRefError('%s is empty; expected a fully qualified reference such as %s' % (what, EXAMPLE))
    if reference != reference.strip() or any(c.isspace() for c in reference):
        raise ImageRefError('%s %r contains white space' % (what, reference))
    if '://' in reference:
        raise ImageRefError(
            '%s %r carries a transport or scheme; expected a plain registry reference such as %s'
            % (what, reference, EXAMPLE))

    name, digest = reference, None
    if '@' in name:
        name, digest = name.split('@', 1)
        validate_digest(digest, what='digest of %s %r' % (what, reference))

    tag = None
    last_slash = name.rfind('/')
    colon = name.rfind(':')
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG_RE.match(tag):
            raise ImageRefError(
                '%s %r has an invalid tag %r; a tag is up to 128 letters, digits, "_", "." '
                'and "-", not starting with "." or "-"' % (what, reference, tag))

    parts = name.split('/')
    if len(parts) < 2 or not is_registry_host(parts[0]):
        raise ImageRefError(
            '%s %r is a short name: it does not start with a registry host. Podman would '
            'resolve it through unqualified-search-registries, which fails without a TTY '
            '("short-name resolution enforced but cannot prompt without a TTY") and is not '
            'reproducible. Expected a fully qualified reference such as %s; remedy: prefix the '
            'registry, e.g. docker.io/%s or quay.io/%s' % (what, reference, EXAMPLE, name, name))
    for component in parts[1:]:
        if not _PATH_COMPONENT_RE.match(component):
            raise ImageRefError(
                '%s %r has an invalid path component %r; expected lowercase letters, digits '
                'and single separators (".", "_", "__", "-")' % (what, reference, component))
    return ImageRef(parts[0], '/'.join(parts[1:]), tag, digest)


def repository_of(name):
    """Repository (without tag/digest) of an image name as podman lists it, or
    None if it cannot be parsed (e.g. ``<none>``)."""
    try:
        return parse_reference(name).repository
    except ImageRefError:
        return None


def plan_pin(reference, digest=None, record=None, resolved_digest=None):
    """Decide which digest pins ``reference``.

    Order: a digest in the reference, then ``digest`` (the variant's), then
    ``resolved_digest`` (just resolved from the tag), then the digest recorded
    for the same reference on an earlier run. Returns a dict with
    ``reference``, ``repository``, ``tag``, ``digest`` (None when the tag must
    be resolved), ``source``, ``pinned_reference``, ``resolve_needed``,
    ``previous`` and ``record`` (the record to write; None until a digest is
    known).
    """
    ref = parse_reference(reference)
    if digest:
        validate_digest(digest, what='variant image digest')
    if ref.digest and digest and ref.digest != digest:
        raise ImageRefError(
            'image reference %s carries digest %s but the variant sets image.digest %s; '
            'remedy: drop one of them or make them agree' % (reference, ref.digest, digest))
    if resolved_digest:
        validate_digest(resolved_digest, what='resolved digest')

    record = record if isinstance(record, dict) else {}
    recorded_digest = record.get('digest') if record.get('reference') == reference else None
    if recorded_digest and not DIGEST_RE.match(str(recorded_digest)):
        recorded_digest = None

    if ref.digest:
        pin, source = ref.digest, 'reference'
    elif digest:
        pin, source = digest, 'variant'
    elif resolved_digest:
        pin, source = resolved_digest, 'resolved'
    elif recorded_digest:
        pin, source = recorded_digest, 'record'
    else:
        pin, source = None, None

    plan = {
        'reference': reference,
        'repository': ref.repository,
        'tag': ref.tag,
        'tagged_reference': ref.tagged(),
        'digest': pin,
        'source': source,
        'pinned_reference': ref.pinned(pin) if pin else None,
        'resolve_needed': pin is None,
        'previous': None,
        'record': None,
    }
    recorded_pin = record.get('pinned_reference')
    if plan['pinned_reference']:
        if recorded_pin and recorded_pin != plan['pinned_reference']:
            previous = recorded_pin
            resolved_from = None
        else:
            previous = record.get('previous')
            resolved_from = record.get('resolved_from')
        if source == 'resolved':
            resolved_from = ref.tagged()
        plan['previous'] = previous
        plan['record'] = {
            'reference': reference,
            'digest': pin,
            'pinned_reference': plan['pinned_reference'],
            'previous': previous,
            'source': source if source != 'record' else record.get('source', 'resolved'),
            'resolved_from': resolved_from,
        }
    else:
        plan['previous'] = recorded_pin or None
    return plan


def image_matches_digest(image, digest):
    """True if a ``podman images --format json`` entry has manifest ``digest``."""
    if not digest:
        return False
    if image.get('Digest') == digest:
        return True
    return any(str(rd).endswith('@' + digest) for rd in image.get('RepoDigests') or [])


def image_repositories(image):
    """Repositories named by a ``podman images --format json`` entry."""
    names = list(image.get('Names') or []) + list(image.get('RepoDigests') or [])
    return set(r for r in (repository_of(n) for n in names) if r)


def select_prune(images, repositories, keep, target_digest=None, in_use_ids=(), protect_digests=()):
    """Choose images to remove before pulling the target.

    ``images``: entries of ``podman images --format json``. Only images of
    ``repositories`` are considered (images the role did not put there are
    never touched). ``keep`` counts the target (one slot is reserved for it
    even before it is pulled), then images used by containers, then
    ``protect_digests`` in order (the rollback target), then the newest.
    Images used by a container are never removed, even beyond ``keep``.

    Returns ``(remove, kept)``: lists of dicts with ``id``, ``names``, ``reason``.
    """
    if keep < 1:
        raise ValueError('keep must be at least 1 (the target image), got %r' % (keep,))
    repositories = set(repositories)
    in_use_ids = set(i for i in in_use_ids if i)
    candidates = [img for img in images if image_repositories(img) & repositories]
    # Newest first; ties broken by id for a stable order.
    candidates.sort(key=lambda img: (-int(img.get('Created') or 0), img.get('Id', '')))

    def _in_use(img):
        return any(str(img.get('Id', '')).startswith(i) or i.startswith(str(img.get('Id', ''))) for i in in_use_ids)

    kept, kept_ids = [], set()

    def _keep(img, reason):
        if img['Id'] not in kept_ids:
            kept_ids.add(img['Id'])
            kept.append({'id': img['Id'], 'names': img.get('Names') or [], 'reason': reason})

    slots = keep - 1  # one slot is the target's, even before it is pulled
    for img in candidates:
        if image_matches_digest(img, target_digest):
            _keep(img, 'target')
    for digest in protect_digests:
        for img in candidates:
            if slots > 0 and img['Id'] not in kept_ids and image_matches_digest(img, digest):
                slots -= 1
                _keep(img, 'rollback target')
    for img in candidates:
        if slots > 0 and img['Id'] not in kept_ids:
            slots -= 1
            _keep(img, 'among the %d newest' % keep)
    for img in candidates:
        if _in_use(img):
            _keep(img, 'used by a container')
    remove = [{'id': img['Id'], 'names': img.get('Names') or [], 'reason': 'beyond image_keep=%d' % keep}
              for img in candidates if img['Id'] not in kept_ids]
    return remove, kept


# The options of inkling.fleet.image_pin (its DOCUMENTATION describes them).
IMAGE_PIN_ARGUMENT_SPEC = dict(
    reference=dict(type='str', required=True),
    digest=dict(type='str'),
    resolved_digest=dict(type='str'),
    record_path=dict(type='path', default='/var/lib/inkling/image/resolved.json'),
    executable=dict(type='str', default='podman'),
)
