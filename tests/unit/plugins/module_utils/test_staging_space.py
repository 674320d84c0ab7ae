# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Staging space per revision (issue 37): preflight and hf_cache ask for the same figure, the bytes of the new
revision's blobs the host does not hold plus one margin, so a new revision that shares no blob with the held one
is refused by preflight, naming that figure, before staging starts."""

import hashlib
import os

import yaml

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import preflight_checks as pc

import test_preflight_checks as tpc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MIB = 1024 * 1024


def blob(rdir, data):
    etag = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(rdir, 'blobs'), exist_ok=True)
    with open(hc.blob_path(rdir, etag), 'wb') as f:
        f.write(data)
    return {'etag': etag, 'size': len(data)}


def fake(size, tag):
    """A listed blob that is not on disk (a file of the hub's list)."""
    return {'etag': hashlib.sha256(tag.encode()).hexdigest(), 'size': size}


def test_one_margin_for_preflight_and_hf_cache():
    def default(path, name):
        with open(os.path.join(REPO, path)) as f:
            return yaml.safe_load(f)[name]
    assert default('roles/hf_cache/defaults/main.yml', 'hf_cache_free_space_margin_pct') == hc.STAGING_MARGIN_PCT
    assert default('roles/preflight/defaults/main/main.yml', 'preflight_disk_margin_pct') == hc.STAGING_MARGIN_PCT


def test_a_held_revision_that_shares_no_blob_counts_for_nothing(tmp_path):
    rdir = str(tmp_path / 'models--org--name')
    old = [blob(rdir, b'o' * 1000), blob(rdir, b'p' * 3000)]
    new = [fake(5000, 'config'), fake(7000, 'shard')]
    assert hc.missing_bytes(rdir, new) == 12000
    # a blob the new revision lists too is held; a partial download counts for what it holds; a blob that is a
    # link is not held; a blob listed twice counts once
    shared = dict(old[1])
    with open(hc.incomplete_path(rdir, new[1]['etag']), 'wb') as f:
        f.write(b's' * 2500)
    os.symlink('/etc/hostname', hc.blob_path(rdir, new[0]['etag']))
    assert hc.missing_bytes(rdir, new + [shared, shared]) == 5000 + 4500
    # a held blob of the wrong size is not held
    assert hc.missing_bytes(rdir, [dict(old[0], size=999)]) == 999


def test_preflight_refuses_a_new_revision_with_no_shared_blob_naming_the_figure(tmp_path):
    """The issue's case: 8 MiB of the old revision held, 3.9 MiB free, a new revision of 8.4 MiB that shares no
    blob. The old estimate (size + margin - what is held) said ok; hf_cache then refused the host."""
    rdir = str(tmp_path / 'models--org--name')
    blob(rdir, b'x' * (8 * MIB))
    new = [fake(int(8.4 * MIB), 'new-shard')]
    missing = hc.missing_bytes(rdir, new)
    disk = {'hub_cache': {'path': '/srv/hub', 'existing': '/srv/hub', 'device': 2, 'free_bytes': int(3.9 * MIB)}}
    variant = dict(tpc.VARIANT, model={'repo_id': 'org/name', 'size_bytes': int(8.4 * MIB)})
    facts = tpc.host_facts(disk=disk, hub_cache_model_bytes=8 * MIB, hub_cache_staging_missing_bytes=missing)
    report = tpc.run(facts=facts, variant=variant, image_free_bytes=0, tmp_free_bytes=0)
    msgs = [f['message'] for f in report['failures'] if f['check'] == 'host.disk']
    assert msgs == ["need 9.2 MiB at /srv/hub for hub_cache (/srv/hub: 8.4 MiB of the new revision's blobs not "
                    "held + 10% margin), 3.9 MiB free"], report['failures']
    # hf_cache's own check asks for the very same bytes
    ok, dummy, details = hc.space_check(str(tmp_path), missing, hc.STAGING_MARGIN_PCT)
    needs = pc.disk_requirements(variant['model']['size_bytes'], hc.STAGING_MARGIN_PCT, 8 * MIB, 0, 0, missing)
    assert details['needed_with_margin_bytes'] == needs['hub_cache'] == hc.staging_need(missing)
    # without the hub's list, the estimate lets it through (what the issue saw), and says it is an estimate
    facts = tpc.host_facts(disk=disk, hub_cache_model_bytes=8 * MIB)
    report = tpc.run(facts=facts, variant=variant, image_free_bytes=0, tmp_free_bytes=0)
    assert 'host.disk' not in tpc.failed(report)
    disk_check = [c for c in report['checks'] if c['check'] == 'host.disk'][0]
    assert "estimated from model.size_bytes: the hub's file list was not read" in disk_check['message']


def test_a_new_revision_that_shares_most_blobs_needs_only_the_rest():
    disk = {'hub_cache': {'path': '/srv/hub', 'existing': '/srv/hub', 'device': 2, 'free_bytes': 10 * MIB}}
    facts = tpc.host_facts(disk=disk, hub_cache_model_bytes=600 * MIB, hub_cache_staging_missing_bytes=5 * MIB)
    variant = dict(tpc.VARIANT, model={'repo_id': 'org/name', 'size_bytes': 605 * MIB})
    report = tpc.run(facts=facts, variant=variant, image_free_bytes=0, tmp_free_bytes=0)
    assert report['ok'], report['failures']


def test_the_controller_reads_each_revision_once_and_each_host_finds_its_own():
    a = {'model': {'repo_id': 'org/name', 'revision': 'a' * 40}}
    b = {'model': {'repo_id': 'org/name', 'revision': 'b' * 40}}
    picked = [{'variant': a}, {'variant': b}, {'variant': a}, {}, {'skipped': True}, {'variant': None}]
    assert hc.staging_revisions(picked) == [{'repo_id': 'org/name', 'revision': 'a' * 40},
                                            {'repo_id': 'org/name', 'revision': 'b' * 40}]
    results = [{'item': {'repo_id': 'org/name', 'revision': 'a' * 40},
                'files': [{'path': 'x', 'etag': 'e1', 'size': 3, 'lfs': True}]},
               {'item': {'repo_id': 'org/name', 'revision': 'b' * 40}, 'failed': True, 'msg': 'hub down'}]
    assert hc.staging_files_for(results, a) == [{'etag': 'e1', 'size': 3}]
    assert hc.staging_files_for(results, b) is None                  # the hub did not answer: estimate
    assert hc.staging_files_for([], a) is None and hc.staging_files_for(results, {}) is None
