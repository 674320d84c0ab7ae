# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The lab's shared services, as `lab/lab.sh up --services-only` leaves them for this checkout.

Run after that command (scripts/test.sh's lab-services step): `pytest -q tests/lab`. Nothing here
skips: a lab that is not up, or that another checkout started (another CA, another synthetic
model), is a failure that says so.
"""

import json
import os
import subprocess
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAB = os.path.join(REPO, 'lab')
STATE = os.path.join(LAB, '.state')
GROUP_VARS = os.path.join(REPO, 'inventory', 'lab', 'group_vars', 'all')
UP = 'run lab/lab.sh up --services-only from this checkout first'


def lib_value(name):
    out = subprocess.run(['bash', '-c', '. "$1"; echo "${%s}"' % name, 'lib', os.path.join(LAB, 'scripts', 'lib.sh')],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def load(name):
    path = os.path.join(GROUP_VARS, name)
    assert os.path.isfile(path), '%s is missing: %s' % (path, UP)
    with open(path, encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def curl(*args):
    """HTTP status of a curl call, or the curl error when there was no HTTP answer."""
    res = subprocess.run(['curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '10'] + list(args),
                         capture_output=True, text=True, check=False)
    return res.stdout.strip() if res.returncode == 0 else 'curl exit %d: %s' % (res.returncode, res.stderr.strip())


def test_registry_uses_this_checkouts_ca_and_credentials():
    ca = os.path.join(STATE, 'pki', 'ca.crt')
    assert os.path.isfile(ca), '%s is missing: %s' % (ca, UP)
    url = 'https://127.0.0.1:%s/v2/' % lib_value('LAB_REGISTRY_PORT')
    # TLS is verified against this checkout's CA: a registry another checkout started fails here.
    assert curl('--cacert', ca, url) == '401', 'the lab registry at %s, checked with %s (%s)' % (url, ca, UP)
    settings = load('lab.yml')
    creds = '%s:%s' % (settings['lab_registry_username'], settings['lab_registry_password'])
    assert curl('--cacert', ca, '-u', creds, url) == '200'
    assert curl('--cacert', ca, '-u', creds + 'x', url) == '401'


def test_registry_holds_the_standin_digests_this_checkout_generated():
    generated = load('generated.yml')
    settings = load('lab.yml')
    ca = os.path.join(STATE, 'pki', 'ca.crt')
    repo = generated['lab_generated_standin_image'].split('/', 1)[1]
    for tag in ('lab', 'bad', 'oldarch', 'garbage', 'mmbroken', 'drift', 'slow', 'overload'):
        key = 'lab_generated_standin_digest_' + tag
        res = subprocess.run(
            ['curl', '-sSf', '--max-time', '10', '--cacert', ca, '-u',
             '%s:%s' % (settings['lab_registry_username'], settings['lab_registry_password']),
             '-H', 'Accept: application/vnd.oci.image.manifest.v1+json',
             '-H', 'Accept: application/vnd.docker.distribution.manifest.v2+json', '-I',
             'https://127.0.0.1:%s/v2/%s/manifests/%s' % (lib_value('LAB_REGISTRY_PORT'), repo, tag)],
            capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr
        headers = dict(line.split(':', 1) for line in res.stdout.splitlines() if ':' in line)
        digest = {k.strip().lower(): v.strip() for k, v in headers.items()}['docker-content-digest']
        assert digest == generated[key], tag


def test_hub_serves_the_model_this_checkout_generated():
    generated = load('generated.yml')
    base = 'http://127.0.0.1:%s' % lib_value('LAB_HUB_PORT')
    assert curl(base + '/_fake/health') == '200', 'the lab hub at %s (%s)' % (base, UP)
    for repo_id in generated['lab_generated_model_repos']:
        with urllib.request.urlopen('%s/api/models/%s/revision/main' % (base, repo_id), timeout=10) as resp:
            info = json.load(resp)
        if repo_id == generated['lab_generated_model_repo_id']:
            assert info['sha'] == generated['lab_generated_model_revision']
        assert info['id'] == repo_id
