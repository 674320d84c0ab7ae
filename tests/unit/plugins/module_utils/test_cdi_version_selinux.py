# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""cdi.version (the spec's cdiVersion against the CDI versions the installed podman parses) and host.selinux
(container_use_devices, label=disable).

The podman table is roles/preflight/defaults/main/cdi_versions.yml. The failing case is the one of
NVIDIA/nvidia-container-toolkit#1860 and #1940: podman 4.9.3 (Ubuntu 24.04) and a spec with additionalGids
(CDI 0.7.0), "json: unknown field \"additionalGids\"", then "unresolvable CDI devices".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc
from inkling_test_helpers import REPO

TABLE_FILE = os.path.join(REPO, 'roles', 'preflight', 'defaults', 'main', 'cdi_versions.yml')

# What nvidia-ctk writes (keys as the lab's template and the toolkit's output), and the same with additionalGids.
SPEC_050 = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
"""
SPEC_GIDS = SPEC_050.replace('cdiVersion: 0.5.0', 'cdiVersion: 0.7.0').replace(
    "    - path: /dev/nvidia0\n- name: all", "    - path: /dev/nvidia0\n    additionalGids:\n    - 44\n- name: all")


@pytest.fixture(scope='module')
def table():
    with open(TABLE_FILE) as handle:
        return yaml.safe_load(handle)['preflight_podman_cdi_versions']


def spec(text, yaml_load=yaml.safe_load):
    return pc.parse_cdi_spec(text, '/etc/cdi/nvidia.yaml', yaml_load)


def podman(version):
    return {'found': True, 'version': version}


def test_table_rows_are_consistent(table):
    releases = [tuple(pc.parse_version(r['podman'])) for r in table]
    assert releases == sorted(set(releases)), 'one row per podman minor release, in order'
    for row in table:
        assert row['cdi_spec_max'] in pc.CDI_SPEC_VERSIONS
        # A CDI library vX.Y.z parses spec versions up to X.Y.0 (specs-go/version.go of each tag).
        assert pc.parse_version(row['cdi_library'])[:2] == pc.parse_version(row['cdi_spec_max'])[:2]
        assert row['source'].startswith('podman v%s.' % row['podman'])


@pytest.mark.parametrize('load', [yaml.safe_load, None], ids=['pyyaml', 'line-reader'])
def test_versions_read_from_the_spec(load):
    plain = spec(SPEC_050, load)
    assert (plain['cdi_version'], plain['required_version'], plain['required_by']) == (
        '0.5.0', '0.5.0', ['device name starting with a digit'])
    gids = spec(SPEC_GIDS, load)
    expected = ('0.7.0', '0.7.0', ['additionalGids'])
    assert (gids['cdi_version'], gids['required_version'], gids['required_by']) == expected


def test_support_rows(table):
    assert pc.podman_cdi_support('4.9.3', table)[0]['cdi_spec_max'] == '0.6.0'
    assert pc.podman_cdi_support('5.4.2', table)[0]['cdi_spec_max'] == '0.8.0'
    assert pc.podman_cdi_support('5.9.0', table) == (table[-1], True)
    assert pc.podman_cdi_support('4.2.0', table) == (None, False)


def test_podman_493_and_a_spec_with_additional_gids(table):
    (check,) = pc.check_cdi_version([spec(SPEC_GIDS)], podman('4.9.3'), table)
    assert not check['ok'] and check['level'] == 'error'
    assert check['message'] == (
        'CDI spec /etc/cdi/nvidia.yaml is cdiVersion 0.7.0 (it uses additionalGids), but podman 4.9.3 reads CDI '
        'specs up to 0.6.0 (built with container-device-interface v0.6.2): podman skips the spec and fails with '
        '"unresolvable CDI devices nvidia.com/gpu=all"')
    assert check['remedy'].startswith('upgrade podman to 5.1 or newer (it reads CDI specs up to 0.7.0), or '
                                      'regenerate the spec with a container toolkit that writes cdiVersion 0.6.0 '
                                      'or lower')


def test_a_spec_declaring_less_than_its_keys_need(table):
    low = spec(SPEC_GIDS.replace('cdiVersion: 0.7.0', 'cdiVersion: 0.5.0'))
    (check,) = pc.check_cdi_version([low], podman('5.4.2'), table)
    assert not check['ok']
    assert check['message'] == ('CDI spec /etc/cdi/nvidia.yaml declares cdiVersion 0.5.0 but uses additionalGids, '
                                'which needs 0.7.0: podman rejects it')


def test_lab_and_current_podman_read_the_toolkit_spec(table):
    for version in ('4.4.1', '5.4.2', '5.8.2'):
        (check,) = pc.check_cdi_version([spec(SPEC_050)], podman(version), table)
        assert check['ok'], check['message']


def test_podman_newer_than_the_table_is_a_warning(table):
    newest = spec(SPEC_050.replace('cdiVersion: 0.5.0', 'cdiVersion: 1.1.0'))
    (check,) = pc.check_cdi_version([newest], podman('6.0.0'), table)
    assert not check['ok'] and check['level'] == 'warning'
    assert 'podman 6.0.0 is newer than the table (podman 5.8 reads up to 1.0.0)' in check['message']


def test_unreleased_version(table):
    (check,) = pc.check_cdi_version([spec(SPEC_050.replace('0.5.0', '0.9.0'))], podman('5.4.2'), table)
    assert not check['ok'] and 'no released CDI spec version' in check['message']


def test_check_cdi_runs_the_version_check_on_the_specs_podman_reads(table):
    gpu = {'driver_version': '580.159.04', 'gpus': [{'index': 0, 'uuid': 'GPU-0'}]}
    checks = pc.check_cdi(gpu, [spec(SPEC_GIDS)], podman('4.9.3'), None, [], None, table)
    assert [c['check'] for c in checks if not c['ok']] == ['cdi.version']
    assert pc.check_cdi(gpu, [spec(SPEC_GIDS)], podman('4.9.3'), None, [], None, None)[0]['check'] == 'cdi.location'


# --- SELinux -------------------------------------------------------------------------------------------

def test_enforcing_with_label_disable_says_why_it_is_fine():
    (check,) = pc.check_selinux('enforcing', False, True)
    assert check['ok']
    assert check['message'] == ('SELinux enforcing is fine here: the service runs its container with label=disable '
                                '(SecurityLabelDisable=true), so SELinux does not confine its access to /dev/nvidia* '
                                '(container_use_devices is off and not needed)')


def test_enforcing_with_labels_needs_container_use_devices():
    (bad,) = pc.check_selinux('enforcing', False, False)
    assert not bad['ok'] and bad['level'] == 'error'
    assert '`setsebool -P container_use_devices on`' in bad['remedy']
    (good,) = pc.check_selinux('enforcing', True, False)
    assert good['ok'] and 'container_use_devices on' in good['message']
    (unknown,) = pc.check_selinux('enforcing', None, False)
    assert not unknown['ok'] and unknown['level'] == 'warning'


def test_permissive_and_disabled():
    assert pc.check_selinux('permissive', None, False)[0]['ok']
    assert pc.check_selinux(None)[0]['message'] == 'SELinux disabled'
