# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The inkling_variant action, run by ansible-playbook: what the task leaves out comes from the
host's variables and the collection's table (data/variants.yml)."""

import json
import os
import subprocess
import sys

from inkling_test_helpers import facts_from_rows, h200_rows

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
DIGEST_A = 'sha256:' + 'a' * 64
DIGEST_B = 'sha256:' + 'b' * 64

PLAYBOOK = '''
- hosts: gpu-01
  gather_facts: false
  tasks:
    - name: pick with the host's layers
      inkling.fleet.inkling_variant:
        gpu: "{{ gpu }}"
        model: thinkingmachines/Inkling-NVFP4
        tensor_parallel_size: 8
        host: "{{ inventory_hostname }}"
      register: layered
      ignore_errors: true
    - name: pick with no overrides at all
      inkling.fleet.inkling_variant:
        gpu: "{{ gpu }}"
        model: thinkingmachines/Inkling-NVFP4
        tensor_parallel_size: 8
        overrides: {}
      register: plain
      ignore_errors: true
    - name: pick for the host's deployment
      inkling.fleet.inkling_variant:
        gpu: "{{ gpu }}"
      register: deployed
      ignore_errors: true
    - name: no GPU facts
      inkling.fleet.inkling_variant:
        gpu: null
      register: no_gpu
    - name: write what came back
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'layered': layered, 'plain': plain, 'deployed': deployed, 'no_gpu': no_gpu} | to_json }}"
        mode: "0600"
'''


def run(tmp_path, host_vars):
    inv = tmp_path / 'inventory.yml'
    variables = dict(host_vars, gpu=facts_from_rows(h200_rows(8)), out=str(tmp_path / 'out.json'),
                     ansible_connection='local', ansible_python_interpreter=sys.executable)
    inv.write_text(json.dumps({'all': {'hosts': {'gpu-01': variables}}}))
    book = tmp_path / 'play.yml'
    book.write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(inv), str(book)]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / 'out.json').read_text())


def test_the_host_layers_merge_in_name_order_and_explicit_overrides_win(tmp_path):
    got = run(tmp_path, {
        'inkling_variant_overrides': {'sm90-patched': {'image': {'digest': DIGEST_A}}},
        'inkling_variant_overrides_site': {'sm90-patched': {'image': {'digest': '{{ site_digest }}'}}},
        'site_digest': DIGEST_B,
    })
    assert got['layered']['variant']['name'] == 'sm90-patched'
    assert got['layered']['variant']['image']['digest'] == DIGEST_B    # the later layer, templated
    assert got['plain']['variant']['image']['digest'] is None           # the collection's table as shipped


def test_a_bad_layer_fails_the_task_naming_it(tmp_path):
    got = run(tmp_path, {'inkling_variant_overrides_site': ['not', 'a', 'dict']})
    assert got['layered']['failed'] is True
    assert got['layered']['table_errors'] == ['inkling_variant_overrides_site must be a dict keyed by variant '
                                              'name, got list']
    assert got['plain']['variant']['name'] == 'sm90-patched'


def test_a_whole_table_of_the_host_replaces_the_collections(tmp_path):
    got = run(tmp_path, {'inkling_variant_table': {}})
    assert got['layered']['failed'] is True and 'sm90-patched' not in json.dumps(got['layered'].get('variant'))


def test_the_model_and_size_come_from_the_host_else_the_collections_data(tmp_path):
    got = run(tmp_path, {})
    assert got['deployed']['deployment'] == {'model': 'thinkingmachines/Inkling-NVFP4', 'tensor_parallel_size': 8}
    assert got['deployed']['variant']['name'] == 'sm90-patched'
    # no GPU facts: no pick, and still what the host would serve
    assert got['no_gpu']['skipped'] is True and 'variant' not in got['no_gpu']
    assert got['no_gpu']['deployment'] == got['deployed']['deployment']
    got = run(tmp_path, {'inkling_model': 'thinkingmachines/Inkling-Small-NVFP4', 'inkling_tensor_parallel_size': '2'})
    assert got['deployed']['deployment'] == {'model': 'thinkingmachines/Inkling-Small-NVFP4', 'tensor_parallel_size': 2}
    # Inkling-Small at TP 2 on 8 H200s: the small entry, not sm90-patched
    assert got['deployed']['variant']['name'] == 'sm90-small-tp2'


def test_the_names_of_release_0_1_are_still_read(tmp_path):
    got = run(tmp_path, {'preflight_model': 'thinkingmachines/Inkling-Small-NVFP4',
                         'preflight_tensor_parallel_size': 2,
                         'preflight_variant_overrides': {'sm90-small-tp2': {'image': {'digest': DIGEST_A}}},
                         'inkling_variant_overrides_site': {'sm90-patched': {'image': {'digest': DIGEST_B}}}})
    assert got['deployed']['variant']['name'] == 'sm90-small-tp2'
    assert got['deployed']['variant']['image']['digest'] == DIGEST_A
    assert got['layered']['variant']['image']['digest'] == DIGEST_B     # old and new layers both merged
