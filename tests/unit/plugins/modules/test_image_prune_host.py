# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""image_prune run as Ansible runs it, with the role's files: the auth file, the mirror drop-in, the prune (against the fake
podman of test_image_modules) and the pin record in one run; check mode, diff mode, idempotence, no secret in
the output, and the files byte for byte as the role's copy/template tasks wrote them before."""

import base64
import getpass
import grp
import json
import os
import stat

from inkling_test_helpers import run_module
from test_image_modules import D1, D2, D3, D4, REPO, fake_podman, image, load_state

SECRET = 'pä:ss-not-shown'
# what the role's copy task wrote (to_nice_json(indent=2) and a final newline) for these credentials
AUTH_BEFORE = ('{\n  "auths": {\n    "a.example:5000": {\n      "auth": "dTpzZWNvbmQtc2VjcmV0"\n    },\n'
               '    "quay.io": {\n      "auth": "%s"\n    }\n  }\n}\n'
               % base64.b64encode(('robot:' + SECRET).encode('utf-8')).decode('ascii'))
RECORD = {'reference': REPO + ':v2', 'digest': D2, 'pinned_reference': REPO + '@' + D2,
          'previous': REPO + '@' + D1, 'source': 'resolved', 'resolved_from': REPO + ':v2'}
MIRROR = '# Ansible managed\n\n[[registry]]\nprefix = "quay.io"\n'


def args(tmp_path, podman, **extra):
    out = {
        'registry_auth': [{'registry': 'quay.io', 'username': 'robot', 'password': SECRET},
                          {'registry': 'a.example:5000', 'username': 'u', 'password': 'second-secret'}],
        'auth_file': str(tmp_path / 'etc' / 'inkling' / 'registry-auth.json'),
        'mirror_dropin': str(tmp_path / 'conf.d' / '50-inkling-mirror.conf'),
        'mirror_content': MIRROR,
        'repositories': [REPO], 'keep': 2, 'target_digest': D4, 'protect': [D2],
        'record': RECORD, 'record_path': str(tmp_path / 'image' / 'resolved.json'),
        'owner': getpass.getuser(), 'group': grp.getgrgid(os.getgid()).gr_name,
        'executable': podman, '_ansible_diff': True,
    }
    out.update(extra)
    return out


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_first_run_writes_everything_and_a_second_changes_nothing(tmp_path):
    (tmp_path / 'conf.d').mkdir()
    podman, state = fake_podman(tmp_path, [image('a', D1, 1), image('b', D2, 2), image('c', D3, 3)])
    rc, result = run_module('image_prune', args(tmp_path, podman), tmp_path=tmp_path)
    assert rc == 0, result
    assert result['changed'] is True
    auth = tmp_path / 'etc' / 'inkling' / 'registry-auth.json'
    assert auth.read_text() == AUTH_BEFORE and mode(auth) == 0o600 and mode(auth.parent) == 0o755
    assert (tmp_path / 'conf.d' / '50-inkling-mirror.conf').read_text() == MIRROR
    record = tmp_path / 'image' / 'resolved.json'
    assert json.loads(record.read_text()) == RECORD and mode(record) == 0o644
    assert record.read_text() == json.dumps(RECORD, indent=2, sort_keys=True, separators=(',', ': ')) + '\n'
    assert sorted(r['id'][0] for r in result['removed']) == ['a', 'c']
    assert sorted(i['Id'][0] for i in load_state(state)['images']) == ['b']
    assert result['auth_file']['changed'] and result['record']['changed'] and result['mirror_dropin']['changed']
    # the diff shows the drop-in and the record, never the credentials
    text = json.dumps(result)
    assert SECRET not in text and base64.b64encode(('robot:' + SECRET).encode('utf-8')).decode() not in text
    afters = [d.get('after') for d in result['diff']]
    assert MIRROR in afters and record.read_text() in afters
    assert not any(d.get('after_header') == str(auth) for d in result['diff'])

    rc, again = run_module('image_prune', args(tmp_path, podman), tmp_path=tmp_path)
    assert rc == 0 and again['changed'] is False and again['diff'] == [] and again['removed'] == [], again


def test_an_auth_file_the_role_wrote_before_is_left_as_it_is(tmp_path):
    podman, dummy = fake_podman(tmp_path, [])
    auth = tmp_path / 'etc' / 'inkling' / 'registry-auth.json'
    auth.parent.mkdir(parents=True)
    auth.write_text(AUTH_BEFORE)
    os.chmod(str(auth), 0o600)
    os.chmod(str(auth.parent), 0o755)
    rc, result = run_module('image_prune', args(tmp_path, podman, mirror_dropin=None, repositories=None,
                                                record=None), tmp_path=tmp_path)
    assert rc == 0 and result['changed'] is False, result


def test_check_mode_reports_and_changes_nothing(tmp_path):
    (tmp_path / 'conf.d').mkdir()
    podman, state = fake_podman(tmp_path, [image('a', D1, 1), image('b', D2, 2), image('c', D3, 3)])
    rc, result = run_module('image_prune', args(tmp_path, podman), tmp_path=tmp_path, check_mode=True)
    assert rc == 0 and result['changed'] is True, result
    assert sorted(os.listdir(str(tmp_path / 'conf.d'))) == []
    assert not (tmp_path / 'etc').exists() and not (tmp_path / 'image').exists()
    assert len(load_state(state)['images']) == 3
    assert any(d.get('after') == {'path': str(tmp_path / 'image'), 'state': 'directory'} for d in result['diff'])


def test_no_mirror_removes_the_dropin_and_a_mode_is_repaired(tmp_path):
    podman, dummy = fake_podman(tmp_path, [])
    dropin = tmp_path / 'conf.d' / '50-inkling-mirror.conf'
    dropin.parent.mkdir()
    dropin.write_text(MIRROR)
    record = tmp_path / 'image' / 'resolved.json'
    record.parent.mkdir()
    record.write_text(json.dumps(RECORD, indent=2, sort_keys=True, separators=(',', ': ')) + '\n')
    os.chmod(str(record), 0o600)
    rc, result = run_module('image_prune', args(tmp_path, podman, registry_auth=[], auth_file=None,
                                                mirror_content='', repositories=None), tmp_path=tmp_path)
    assert rc == 0 and result['changed'] is True, result
    assert not dropin.exists() and result['mirror_dropin'] == {'path': str(dropin), 'state': 'absent', 'changed': True}
    assert mode(record) == 0o644 and result['record']['changed']
    assert {'path': str(dropin), 'state': 'absent'} in [d['after'] for d in result['diff']]
    assert 'auth_file' not in result


def test_prune_problems_are_reported_as_image_prune_words_them(tmp_path):
    podman, dummy = fake_podman(tmp_path, [image('a', D1, 1), image('b', D2, 2)], refuse_rmi=['a' * 64])
    rc, result = run_module('image_prune', args(tmp_path, podman, keep=0), tmp_path=tmp_path)
    assert rc == 1 and 'keep must be at least 1' in result['msg']
    rc, result = run_module('image_prune', args(tmp_path, podman, registry_auth=[], mirror_dropin=None,
                                                record=None, keep=1, target_digest=D2, protect=[]),
                            tmp_path=tmp_path)
    assert rc == 1 and 'could not remove old image aaaaaaaaaaaa' in result['msg'], result


def test_credentials_without_an_auth_file_are_refused(tmp_path):
    rc, result = run_module('image_prune', {'registry_auth': [{'registry': 'r', 'username': 'u',
                                                               'password': SECRET}]}, tmp_path=tmp_path)
    assert rc == 1 and 'needs auth_file' in result['msg'] and SECRET not in json.dumps(result)
