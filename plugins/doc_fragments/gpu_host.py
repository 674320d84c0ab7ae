# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The options of the modules that read a GPU host's driver, fabric manager, NVSwitch devices and
kernel modules (preflight_host_facts, preflight_recheck)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  driver_version_file:
    description: File with the loaded kernel module version, as C(/proc/driver/nvidia/version) prints it.
    type: path
    default: /proc/driver/nvidia/version
  fabricmanager_unit:
    description: systemd unit of the NVIDIA fabric manager.
    type: str
    default: nvidia-fabricmanager
  fabricmanager_path:
    description: The fabric manager binary, asked for its version.
    type: str
    default: nv-fabricmanager
  lspci_path:
    description: The lspci binary (NVSwitch devices).
    type: str
    default: lspci
  kernel_modules_file:
    description: The list of loaded kernel modules (NVLink5 boards need C(ib_umad)).
    type: path
    default: /proc/modules
'''
