# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""State left on the scenario's hosts by converge and side_effect."""

import json
import os

import testinfra
import testinfra.utils.ansible_runner
import yaml

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ['MOLECULE_INVENTORY_FILE']).get_hosts('inkling_fleet')

# The role's own paths, so that a rename there cannot turn a check of absence into a no-op.
with open(os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'hf_cache', 'vars', 'main.yml')) as _f:
    ROLE_VARS = yaml.safe_load(_f)
RSYNCD_CONF = ROLE_VARS['__hf_cache_rsyncd_conf']
PEER_RUNDIR = ROLE_VARS['__hf_cache_peer_rundir']
RSYNCD_UNIT = ROLE_VARS['__hf_cache_rsyncd_unit']

with open(os.path.join(os.environ['MOLECULE_EPHEMERAL_DIRECTORY'], 'hf-test.json')) as _f:
    HUB = json.load(_f)
COMMIT = HUB['commit']
FOLDER = 'models--' + HUB['repo_id'].replace('/', '--')
DEFAULT = '/var/lib/inkling/huggingface/hub'


# One command per snapshot (the ansible backend makes every host call a full ansible run).
PROBE = r"""
import hashlib, json, os, stat, sys
rdir, commit = sys.argv[1], sys.argv[2]
snap = os.path.join(rdir, 'snapshots', commit)
def rj(p):
    with open(p) as f:
        return json.load(f)
out = {'manifest': rj(os.path.join(rdir, '.inkling', commit + '.json')),
       'marker': os.path.exists(os.path.join(rdir, '.inkling', commit + '.complete')),
       'refs_main': open(os.path.join(rdir, 'refs', 'main')).read().strip(),
       'incomplete': [n for n in os.listdir(os.path.join(rdir, 'blobs')) if n.endswith('.incomplete')],
       'blobs_mode': stat.S_IMODE(os.stat(os.path.join(rdir, 'blobs')).st_mode),
       'index': rj(os.path.join(snap, 'model.safetensors.index.json')), 'files': {}}
for e in out['manifest']['files']:
    link = os.path.join(snap, e['path'])
    info = {'islink': os.path.islink(link), 'target': os.readlink(link) if os.path.islink(link) else None}
    if os.path.exists(link):
        data = open(link, 'rb').read()
        st = os.stat(link)
        info.update(size=len(data), uid=st.st_uid, mode=stat.S_IMODE(st.st_mode),
                    sha256=hashlib.sha256(data).hexdigest(),
                    sha1=hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest())
    out['files'][e['path']] = info
print(json.dumps(out))
"""


def check_snapshot(host, cache):
    rdir = '%s/%s' % (cache, FOLDER)
    res = json.loads(host.check_output('python3 -c %s %s %s', PROBE, rdir, COMMIT))
    manifest = res['manifest']
    assert manifest['revision'] == COMMIT and manifest['repo_id'] == HUB['repo_id']
    assert len(manifest['files']) == HUB['files']
    assert manifest['total_bytes'] == HUB['total_bytes']
    assert res['marker'] and res['refs_main'] == COMMIT
    assert res['incomplete'] == [] and res['blobs_mode'] == 0o755
    for entry in manifest['files']:
        got = res['files'][entry['path']]
        assert got['islink'], entry['path']
        assert got['target'] == '../' * (entry['path'].count('/') + 2) + 'blobs/' + entry['etag']
        assert got['size'] == entry['size'] and got['uid'] == 0 and got['mode'] == 0o644
        assert got['sha256' if entry['lfs'] else 'sha1'] == entry['etag']
    # every shard of the index resolves (F10)
    for shard in set(res['index']['weight_map'].values()):
        assert res['files'][shard]['size'] > 0


def test_staged_snapshot(host):
    check_snapshot(host, DEFAULT)


def test_peer_snapshot(host):
    check_snapshot(host, '/srv/peer/hub')


def _platform(name):
    """The scenario's host NAME; an error (not a skip) when the scenario has no such platform."""
    assert name in testinfra_hosts, 'platform %s is missing from the scenario (it has %s)' % (name, testinfra_hosts)
    return testinfra.get_host('ansible://' + name, ansible_inventory=os.environ['MOLECULE_INVENTORY_FILE'])


def test_resumed_snapshot():
    """side_effect.yml interrupts and resumes a download on mol-hf-02."""
    host = _platform('mol-hf-02')
    check_snapshot(host, '/srv/resume/hub')
    progress = json.loads(host.file('/srv/resume/hub/%s/.inkling/%s.progress.json' % (FOLDER, COMMIT)).content_string)
    assert progress['state'] == 'done' and progress['bytes_resumed'] == 1048576


def test_links_are_relative(host):
    out = host.check_output('find %s/%s/snapshots -type l -lname "/*"', DEFAULT, FOLDER)
    assert out == ''


def test_venv_has_pinned_huggingface_hub(host):
    out = host.check_output('/opt/inkling-fleet/venv/bin/python -c "import huggingface_hub as h; print(h.__version__)"')
    assert out.strip() == '2.4.0'


def test_no_rsync_daemon_left(host):
    assert RSYNCD_CONF == '/run/inkling-hf-rsyncd.conf' and PEER_RUNDIR == '/run/inkling-hf-cache'
    # The daemon did run on this host (every host seeds or serves at least once in the scenario) ...
    journal = host.check_output('journalctl --no-pager -o cat -u %s.service', RSYNCD_UNIT)
    assert 'Started %s.service' % RSYNCD_UNIT in journal
    # ... and is gone, with its configuration and the copy jobs' state.
    assert not host.service(RSYNCD_UNIT).is_running
    assert host.run('pgrep -x rsync').rc != 0
    assert not host.file(RSYNCD_CONF).exists
    assert not host.file(PEER_RUNDIR).exists
    # nor the run's secret, nor a copy job's pid file
    assert not host.file(ROLE_VARS['__hf_cache_rsyncd_secrets']).exists
    assert not host.file(ROLE_VARS['__hf_cache_peer_pidfile']).exists


def test_huggingface_hub_reads_it_offline(host):
    """What the service does: HF_HUB_OFFLINE=1 with the cache read-only to the reader (F9)."""
    cmd = ('env HOME=/tmp HF_HUB_OFFLINE=1 HF_HUB_CACHE=%s /opt/inkling-fleet/venv/bin/python -c '
           '"from huggingface_hub import snapshot_download; print(snapshot_download(\'%s\'))"')
    out = host.check_output('setpriv --reuid=65534 --regid=65534 --clear-groups ' + cmd, DEFAULT, HUB['repo_id'])
    assert out.strip().endswith('/snapshots/' + COMMIT)
