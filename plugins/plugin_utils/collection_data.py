# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The collection's data files (``data/``), read on the controller: the variant table
(``variants.yml``), the deployment's defaults (``deployment.yml``) and the canary analysis's
golden set (``golden_set.yml``). Plugins read them here, never a role's defaults by path."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import os

import yaml

DATA_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', 'data'))

_LOADED = {}


def load(name, data_dir=DATA_DIR):
    """The parsed file ``data/<name>``: a copy the caller may change. Each file is parsed once
    per process (libyaml where present: an action reads it once per host and task)."""
    path = os.path.join(data_dir, name)
    if path not in _LOADED:
        with open(path) as f:
            _LOADED[path] = yaml.load(f, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))  # nosec B506: safe
    return copy.deepcopy(_LOADED[path])


def golden_set():
    """The golden set the collection ships (a list of prompt entries)."""
    return load('golden_set.yml')['prompts']


def deployment():
    """The collection's default deployment: ``model`` and ``tensor_parallel_size``."""
    return load('deployment.yml')
