# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The service role's checks (roles/service, docs/service.md).

- ``input_problems``: its inputs, on the controller, before anything changes (the filter
  service_input_problems; one assert in roles/service/tasks/validate.yml). Pure.
- What the unit needs on its host, for the module service_host: whether the image is in local podman
  storage (``image_present`` reads ``podman image exists``), where the snapshot's config.json is
  (``snapshot_config_path``), and a root-only directory made or fixed (``root_dir``).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import re
from collections.abc import Mapping

# The service role's own checks, as its asserts had them.
REPO_ID_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$')
IMAGE_RE = re.compile(r'^[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[^@\s]+@sha256:[0-9a-f]{64}$')
REVISION_RE = re.compile(r'^[0-9a-f]{40}$')
# The vLLM flags the role adds itself (from service_* variables); a variant may not set them.
RESERVED_FLAGS = ('--model', '--revision', '--served-model-name', '--host', '--port', '--api-key', '--config')
LOOPBACK = ('127.0.0.1', '::1', 'localhost')


class ServiceHostError(Exception):
    """A host-side check could not be answered (podman failed, say)."""


def text(value):
    """A value as the role's templates wrote it into a check or a message (None as empty)."""
    return '' if value is None else str(value)


def to_int(value, default=0):
    """Jinja's ``int`` filter: a number, a numeric string (``"4200"``, ``"4200.0"``), else ``default``."""
    try:
        if isinstance(value, str):
            return int(value, 10)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


def is_sequence(value):
    """Jinja's ``sequence`` test and not a string (the role's check of ``vllm_args``)."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        len(value)
        value.__getitem__  # pylint: disable=pointless-statement
    except (TypeError, AttributeError):
        return False
    return True


def reserved_flags(shutdown_timeout_flag=''):
    """The flags the role adds itself: RESERVED_FLAGS and the drain flag when one is set."""
    return list(RESERVED_FLAGS) + ([shutdown_timeout_flag] if shutdown_timeout_flag else [])


def flag_clash(vllm_args, reserved):
    """The arguments of ``vllm_args`` that are one of ``reserved`` (``--port=8001`` counts as ``--port``)."""
    return [a for a in (re.sub('=.*$', '', text(arg)) for arg in vllm_args) if a in reserved]


def variant_names(variant):
    """(name, repo_id) of a variant, '' where missing."""
    variant = variant if isinstance(variant, Mapping) else {}
    model = variant.get('model')
    return text(variant.get('name')), text(model.get('repo_id')) if isinstance(model, Mapping) else ''


def input_problems(variant, host='', image='', revision='', served_model_name='', port=0, listen='',
                   timeout_start_s=0, engine_ready_timeout_s=0, drain_timeout_s=0, stop_timeout_s=0,
                   timeout_stop_s=0, shutdown_timeout_flag='', api_key_set=False, allow_no_api_key=False):
    """What is wrong with the service role's inputs: one message per problem (the messages of the role's
    asserts), empty when nothing is. ``listen`` is service_host (the address vLLM binds); ``api_key_set``
    whether service_api_key is set (the key itself is never passed)."""
    problems = []
    prefix = '%s: ' % host if host else ''
    name, repo_id = variant_names(variant)
    vllm_args = variant.get('vllm_args', []) if isinstance(variant, Mapping) else None
    args_ok = is_sequence(vllm_args)
    if not (name and REPO_ID_RE.match(repo_id) and args_ok and IMAGE_RE.match(text(image))
            and REVISION_RE.match(text(revision)) and text(served_model_name)
            and 0 < to_int(port) < 65536
            and to_int(timeout_start_s) >= to_int(engine_ready_timeout_s)
            and to_int(stop_timeout_s) > to_int(drain_timeout_s)
            and to_int(timeout_stop_s) > to_int(stop_timeout_s)):
        problems.append(
            '%sservice inputs invalid. Found variant=%s, repo_id=%s, image=%s, revision=%s, served_model_name=%s, '
            'port=%s, TimeoutStartSec=%s vs VLLM_ENGINE_READY_TIMEOUT_S=%s, drain/stop/TimeoutStopSec=%s/%s/%s. '
            'Expected: a variant with name and model.repo_id (org/name) and a vllm_args list; an image fully '
            "qualified and pinned (registry/name@sha256:<64 hex>, from the image role's "
            'image_pinned.pinned_reference); a 40-hex revision (from hf_cache_snapshot.revision); TimeoutStartSec '
            '>= the engine-ready timeout; drain < stop timeout < TimeoutStopSec. Remedy: run preflight, hf_cache '
            'and image first, or set service_variant / service_image / service_revision explicitly.'
            % (prefix, name, repo_id, text(image), text(revision), text(served_model_name), text(port),
               text(timeout_start_s), text(engine_ready_timeout_s), text(drain_timeout_s), text(stop_timeout_s),
               text(timeout_stop_s)))
    if not (api_key_set or allow_no_api_key or text(listen) in LOOPBACK):
        problems.append(
            '%svLLM would listen on %s:%s with no API key, open to anyone who reaches the host. Expected: '
            'service_api_key set (from vault), or service_host 127.0.0.1. Remedy: set service_api_key, or bind to '
            'loopback, or set service_allow_no_api_key: true if an authenticating gateway in front of the fleet is '
            'meant to be the only guard (docs/security.md).' % (prefix, text(listen), text(port)))
    if args_ok:
        reserved = reserved_flags(text(shutdown_timeout_flag))
        clash = flag_clash(vllm_args, reserved)
        if clash:
            problems.append(
                '%svariant %s sets %s in vllm_args; the service role adds %s itself (from service_* variables). '
                'Remove them from the variant (inkling_variant_overrides).'
                % (prefix, name, ', '.join(clash), ', '.join(reserved)))
    return problems


# ---------------------------------------------------------------- on the host

def snapshot_config_path(hub_cache_dir, repo_id, revision):
    """The config.json of a snapshot in a Hugging Face hub cache."""
    return os.path.join(hub_cache_dir, 'models--' + repo_id.replace('/', '--'), 'snapshots', revision, 'config.json')


def image_present(rc, err=''):
    """The answer of ``podman image exists``: 0 present, 1 absent, anything else an error."""
    if rc == 0:
        return True
    if rc == 1:
        return False
    raise ServiceHostError('podman image exists failed (rc=%s): %s' % (rc, (err or '').strip()))


def root_dir(path, mode, check_mode=False):
    """The directory ``path`` owned by root:root with ``mode``, as ansible.builtin.file state=directory makes it:
    missing directories on the way created with the same owner and mode, the directory itself fixed when its
    owner or mode differ (directories above it that exist are left alone). Returns (created, fixed) paths;
    in check mode what would be. Not for a directory a container can write to (links are followed)."""
    path = os.path.normpath(path)
    missing = []
    head = path
    while not os.path.isdir(head):
        if os.path.lexists(head):
            raise ServiceHostError('%s is not a directory' % head)
        missing.insert(0, head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    fixed = []
    if not missing:
        st = os.stat(path)
        if (st.st_mode & 0o7777) != mode or st.st_uid != 0 or st.st_gid != 0:
            fixed.append(path)
            if not check_mode:
                os.chown(path, 0, 0)
                os.chmod(path, mode)
    elif not check_mode:
        for each in missing:
            os.mkdir(each, mode)
            os.chown(each, 0, 0)
            os.chmod(each, mode)
    return missing, fixed


# The options of inkling.fleet.service_host (its DOCUMENTATION describes them).
SERVICE_HOST_ARGUMENT_SPEC = dict(
    image=dict(type='str', required=True),
    hub_cache_dir=dict(type='path', required=True),
    repo_id=dict(type='str', required=True),
    revision=dict(type='str', required=True),
    cache_dir=dict(type='path', required=True),
    subdirs=dict(type='list', elements='str', default=[]),
    cache_root=dict(type='path'),
    backup_dir=dict(type='path'),
    executable=dict(type='str', default='podman'),
)
