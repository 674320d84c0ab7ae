# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Moving a freshly written file in under its name, all or nothing: shared by module_utils/hf_cache.py
(write_json_atomic, on the managed host) and the action plugin inkling.fleet.preflight_report (on the controller)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os


def replace_file(fd, tmp, path, mode, fill):
    """Write the new file ``tmp`` (opened as ``fd``, not yet wrapped) through ``fill(handle)``, a text
    handle, then give it ``mode`` and rename it over ``path`` (which replaces a link there, never its
    target). On any failure, ``tmp`` is removed and the error raised again."""
    try:
        with os.fdopen(fd, 'w') as handle:
            fill(handle)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
