# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""End-to-end checks on every lab host after deploy-inkling.yml ran (testinfra)."""

import json
import os

import testinfra.utils.ansible_runner
import yaml

HOSTS = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ['MOLECULE_INVENTORY_FILE']).get_hosts('inkling_fleet')

UNIT = 'inkling-vllm'
QUADLET = '/etc/containers/systemd/%s.container' % UNIT
STATE = '/var/lib/inkling/rollout/state.json'
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'inventory', 'lab', 'group_vars',
                       'all', 'lab.yml')) as _f:
    LAB_API_KEY = yaml.safe_load(_f)['service_api_key']


def pytest_generate_tests(metafunc):
    if 'hostname' in metafunc.fixturenames:
        metafunc.parametrize('hostname', HOSTS)


def _host(hostname):
    return testinfra.get_host('podman://' + hostname)


def _expected_arch(hostname):
    return 'hopper' if '-h200-' in hostname else 'blackwell'


def test_unit_active(hostname):
    host = _host(hostname)
    assert host.service('%s.service' % UNIT).is_running


def test_state_records_the_variant_for_the_gpus(hostname):
    host = _host(hostname)
    state = json.loads(host.file(STATE).content_string)
    if _expected_arch(hostname) == 'hopper':
        assert state['variant'].startswith('sm90'), state
    else:
        assert state['variant'].startswith('sm100'), state
    assert '@sha256:' in state['image']
    assert len(state['revision']) == 40


def test_unit_pins_image_by_digest_and_variant_args(hostname):
    host = _host(hostname)
    unit = host.file(QUADLET).content_string
    assert '@sha256:' in unit
    assert 'HF_HUB_OFFLINE=1' in unit
    assert 'nvidia.com/gpu=all' in unit
    if _expected_arch(hostname) == 'hopper':
        # sm90-patched turns the CuTeDSL warm-up off through --kernel-config.
        assert 'kernel-config' in unit
        assert 'cubin' not in unit.lower()
    else:
        # sm100 mounts the FlashInfer cubins.
        assert 'cubin' in unit.lower()


def test_model_listed_and_answers(hostname):
    host = _host(hostname)
    state = json.loads(host.file(STATE).content_string)
    # the lab's inventory sets an API key, as a fleet's does: without it the server answers 401
    assert host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models").stdout == '401'
    auth = "-H 'Authorization: Bearer %s'" % LAB_API_KEY
    out = host.check_output('curl -fsS %s http://127.0.0.1:8000/v1/models' % auth)
    ids = [m['id'] for m in json.loads(out)['data']]
    assert state['served_model_name'] in ids
    body = json.dumps({'model': state['served_model_name'], 'prompt': 'hi', 'max_tokens': 1})
    out = host.check_output("curl -fsS %s -H 'Content-Type: application/json' -d '%s' "
                            "http://127.0.0.1:8000/v1/completions" % (auth, body))
    assert json.loads(out)['choices']


def test_hub_cache_mounted_read_only(hostname):
    host = _host(hostname)
    mounts = host.check_output("podman inspect --format '{{json .Mounts}}' %s" % UNIT)
    hub = [m for m in json.loads(mounts) if m['Destination'].rstrip('/').endswith('hub')]
    assert hub, mounts
    assert all(not m['RW'] for m in hub)
