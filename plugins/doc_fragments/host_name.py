# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The required option O(host) of the modules that only name the host in their messages and results
(image_trial, preflight_evaluate, preflight_recheck)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  host:
    description: Host name used in messages.
    type: str
    required: true
'''
