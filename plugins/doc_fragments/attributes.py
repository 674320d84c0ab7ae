# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The attributes blocks the modules of inkling.fleet share (check mode and diff mode support).

ansible-test reads each fragment as a string literal: the blocks are written out in full."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):

    # The descriptions alone: a module that uses it sets each attribute's support itself, or lists
    # inkling.fleet.attributes.check_full_diff_full after it.
    DOCUMENTATION = r'''
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
'''

    # inkling.fleet.attributes.check_full_diff_none: check mode in full, no diff.
    CHECK_FULL_DIFF_NONE = r'''
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
'''

    # inkling.fleet.attributes.check_full_diff_full: check mode and diff mode in full; the support alone, listed
    # after inkling.fleet.attributes, which describes them (Ansible merges the two per attribute).
    CHECK_FULL_DIFF_FULL = r'''
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
'''
