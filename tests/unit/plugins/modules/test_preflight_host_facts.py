# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The file-reading parts of preflight_host_facts, on a temporary tree."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.inkling.fleet.plugins.modules import preflight_host_facts as mod

SPEC = """---
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
  mounts:
  - hostPath: {lib}
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
"""


def test_cdi_specs_reads_yaml_and_marks_missing_host_paths(tmp_path):
    etc, run = tmp_path / 'etc-cdi', tmp_path / 'run-cdi'
    etc.mkdir()
    run.mkdir()
    lib = tmp_path / 'libcuda.so.580.159.04'
    lib.write_text('')
    (etc / 'nvidia.yaml').write_text(SPEC.format(lib=lib))
    (run / 'old.yaml').write_text(SPEC.format(lib='/nonexistent/libcuda.so.570.133.20'))
    (run / 'README').write_text('not a spec')
    specs = mod.cdi_specs([str(etc), str(run), str(tmp_path / 'absent')])
    assert [s['path'] for s in specs] == [str(etc / 'nvidia.yaml'), str(run / 'old.yaml')]
    assert specs[0]['devices'] == ['0', 'all']
    assert specs[0]['missing_host_paths'] == []
    assert specs[1]['missing_host_paths'] == ['/nonexistent/libcuda.so.570.133.20']


def test_blobs_bytes_skips_incomplete_downloads(tmp_path):
    blobs = tmp_path / 'models--thinkingmachines--Inkling-NVFP4' / 'blobs'
    blobs.mkdir(parents=True)
    (blobs / 'a').write_bytes(b'x' * 100)
    (blobs / 'b.incomplete').write_bytes(b'x' * 50)
    assert mod.blobs_bytes(str(tmp_path), 'thinkingmachines/Inkling-NVFP4') == 100
    assert mod.blobs_bytes(str(tmp_path), 'other/model') == 0


def test_disk_info_uses_the_nearest_existing_parent(tmp_path):
    info = mod.disk_info(str(tmp_path / 'not' / 'yet' / 'there'))
    assert info['existing'] == str(tmp_path)
    assert info['free_bytes'] > 0
    assert info['device'] == os.stat(str(tmp_path)).st_dev


def test_containers_conf_drop_ins_override(tmp_path):
    main = tmp_path / 'containers.conf'
    main.write_text('[engine]\ncdi_spec_dirs = ["/etc/cdi"]\n')
    drop = tmp_path / 'containers.conf.d'
    drop.mkdir()
    (drop / '50-x.conf').write_text('[engine]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n'
                                    'image_copy_tmp_dir = "/srv/tmp"\n')
    assert mod.containers_conf([str(main), str(drop)]) == (['/etc/cdi', '/var/run/cdi'], '/srv/tmp')
    assert mod.containers_conf([str(tmp_path / 'absent')]) == (None, None)
