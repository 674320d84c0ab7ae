# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Regression tests from the real 1x H200 replica run (docs/hardware-validation.md, issue 21).

On a real H200 (2026-12-01), playbooks/preflight.yml ran against an inventory naming the machine
twice (h200-head, h200-worker: replica r1) with the table entries of rep-small.yml. The GPU facts
each host recorded in its report are fed to the variant selection again: it must give what the
real run gave (the entry, the worker's arguments, the incomplete-group refusal), and the replica
checks must read the recorded answers the way the run did.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest
import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc
from ansible_collections.inkling.fleet.plugins.module_utils import replica as rep
from ansible_collections.inkling.fleet.plugins.module_utils import variant
from inkling_test_helpers import default_table

RUN = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'hardware-validation',
                   'h200-x1-driver580-2026-12-01-replica')
SMALL = 'thinkingmachines/Inkling-Small-NVFP4'
MEMBERS = ['h200-head', 'h200-worker']


def report(run, host):
    with open(os.path.join(RUN, run, host + '.json')) as f:
        return json.load(f)


def check(rep_json, name):
    return [c for c in rep_json['checks'] if c['check'] == name][0]


@pytest.fixture
def overrides():
    with open(os.path.join(RUN, 'rep-small.yml')) as f:
        return yaml.safe_load(f)['preflight_variant_overrides']


def select(host, gpus, overrides):
    replica = {'name': 'r1', 'members': MEMBERS, 'gpus': gpus, 'head_address': '127.0.0.1', 'port': 29550}
    return variant.select_variant(gpus[host], SMALL, 1, default_table()[0], overrides=overrides, host=host,
                                  replica=replica)


def test_the_recorded_facts_are_one_real_h200():
    gpu = report('small-listener', 'h200-head')['facts']['gpu']
    assert gpu['gpu_count'] == 1 and gpu['compute_caps'] == ['9.0'] and gpu['driver_version'] == '580.159.04'
    assert [(g['name'], g['memory_total_mib']) for g in gpu['gpus']] == [('NVIDIA H200', 143771)]


@pytest.mark.parametrize('host', MEMBERS)
def test_both_members_select_the_two_node_entry_as_on_the_hardware(host, overrides):
    recorded = report('small-listener', host)
    gpus = dict((h, report('small-listener', h)['facts']['gpu']) for h in MEMBERS)
    chosen, reasons = select(host, gpus, overrides)
    assert chosen['name'] == recorded['variant']['name'] == 'sm90-small-2node-tp1'
    assert chosen['replica'] == recorded['variant']['replica']
    assert any('287542 MiB' in r and 'spans 2 nodes' in r for r in reasons), reasons


def test_the_worker_gets_the_recorded_arguments(overrides):
    gpus = dict((h, report('small-listener', h)['facts']['gpu']) for h in MEMBERS)
    worker = select('h200-worker', gpus, overrides)[0]['replica']
    assert worker['role'] == 'worker' and worker['node_rank'] == 1
    assert worker['args'] == ['--headless', '--data-parallel-start-rank', '1', '--data-parallel-address',
                              '127.0.0.1', '--data-parallel-rpc-port', '29550']


def test_without_the_worker_the_head_is_refused_as_on_the_hardware(overrides):
    recorded = check(report('incomplete', 'h200-head'), 'variant')
    gpus = {'h200-head': report('incomplete', 'h200-head')['facts']['gpu'], 'h200-worker': None}
    with pytest.raises(variant.VariantRefused) as err:
        select('h200-head', gpus, overrides)
    assert any('replica r1 is incomplete' in r and 'no GPU facts from h200-worker' in r for r in err.value.reasons)
    assert not recorded['ok'] and 'replica r1 is incomplete in this run' in recorded['message']


def test_a_host_short_of_gpus_is_not_made_a_replica():
    recorded = check(report('defaults', 'h200-head'), 'variant')
    assert not recorded['ok'] and 'blocked by gpu.count' in recorded['message']
    gpu = report('defaults', 'h200-head')['facts']['gpu']
    replica = {'name': 'r1', 'members': MEMBERS, 'gpus': {'h200-head': gpu, 'h200-worker': gpu},
               'head_address': '127.0.0.1', 'port': 29550}
    with pytest.raises(variant.VariantRefused) as err:
        variant.select_variant(gpu, 'thinkingmachines/Inkling-NVFP4', 8, default_table()[0], host='h200-head',
                               replica=replica)
    assert 'gpu.count' in [r['check'] for r in err.value.refusals]


@pytest.mark.parametrize('run, outcome', [('small-nolistener', 'refused'), ('small-listener', 'open')])
def test_the_rendezvous_check_reads_the_probe_as_the_run_did(run, outcome, overrides):
    recorded = check(report(run, 'h200-worker'), 'replica.rendezvous')
    worker = report(run, 'h200-worker')['variant']['replica']
    got = rep.rendezvous_check('h200-worker', worker, outcome, pc.result)
    assert (got['ok'], got['message']) == (recorded['ok'], recorded['message'])


def test_the_fabric_check_on_an_empty_infiniband_directory_as_recorded():
    recorded = check(report('small-listener', 'h200-head'), 'replica.fabric')
    head = report('small-listener', 'h200-head')['variant']['replica']
    got = rep.rdma_check(head, [], '/sys/class/infiniband', True, pc.result)
    assert (got['ok'], got['message'], got['remedy']) == (False, recorded['message'], recorded['remedy'])
