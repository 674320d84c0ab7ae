# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The options of the modules that run podman against a registry with classified retries
(module_utils/podman_cli.py's PODMAN_RETRY_ARGS): image_pull and registry_login."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  retries:
    description:
      - Further attempts after a failed one, for the errors podman's output shows to be passing (nothing
        answering at the registry's address, timeouts, resets, HTTP 5xx and 429); an authentication error, a
        name that does not resolve or any other error fails at once.
    type: int
    default: 3
  retry_delay_s:
    description: Seconds between attempts.
    type: int
    default: 30
  podman_path:
    description: The podman binary (a name looked up on PATH, or a path).
    type: str
    default: podman
  host:
    description: Host name used in messages.
    type: str
    default: this host
'''
