# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""image_pin and image_prune run as Ansible runs them, against a fake podman that keeps
its image store in a JSON file (what `podman images/ps --format json` print)."""

import json
import os
import stat
import sys

from inkling_test_helpers import run_module

D1 = 'sha256:' + '1' * 64
D2 = 'sha256:' + '2' * 64
D3 = 'sha256:' + '3' * 64
D4 = 'sha256:' + '4' * 64
REPO = 'registry.example.com:5000/inkling/vllm'

FAKE_PODMAN = r'''#!%(python)s
import json, sys
STATE = %(state)r
with open(STATE) as f:
    state = json.load(f)
args = sys.argv[1:]
state.setdefault('calls', []).append(args)
def save():
    with open(STATE, 'w') as f:
        json.dump(state, f)
if args[:1] == ['images']:
    print(json.dumps(state['images']))
elif args[:2] == ['ps', '--all']:
    print(json.dumps(state['containers']))
elif args[:2] == ['image', 'exists']:
    name = args[2]
    found = any(name in (i.get('Names') or []) + (i.get('RepoDigests') or []) for i in state['images'])
    save()
    sys.exit(0 if found else 1)
elif args[:1] == ['rmi']:
    if args[1] in state.get('refuse_rmi', []):
        sys.stderr.write('Error: image used by container\n')
        save()
        sys.exit(2)
    state['images'] = [i for i in state['images'] if i['Id'] != args[1]]
else:
    sys.stderr.write('fake podman: unexpected %%r\n' %% (args,))
    save()
    sys.exit(125)
save()
'''


def image(ident, digest, created):
    return {'Id': ident * 64, 'Digest': digest, 'RepoDigests': ['%s@%s' % (REPO, digest)],
            'Names': ['%s@%s' % (REPO, digest)], 'Created': created}


def fake_podman(tmp_path, images, containers=(), refuse_rmi=()):
    state = str(tmp_path / 'podman-state.json')
    with open(state, 'w') as f:
        json.dump({'images': images, 'containers': list(containers), 'refuse_rmi': list(refuse_rmi)}, f)
    path = str(tmp_path / 'podman')
    with open(path, 'w') as f:
        f.write(FAKE_PODMAN % {'python': sys.executable, 'state': state})
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path, state


def load_state(state):
    with open(state) as f:
        return json.load(f)


# --- image_pin ------------------------------------------------------------------------------

def test_pin_refuses_short_name(tmp_path):
    podman, dummy = fake_podman(tmp_path, [])
    rc, result = run_module('image_pin', {'reference': 'vllm/vllm-openai:v0.10.1', 'executable': podman,
                                          'record_path': str(tmp_path / 'none.json')}, tmp_path=tmp_path)
    assert rc == 1 and result['failed']
    assert 'short name' in result['msg'] and 'vllm/vllm-openai:v0.10.1' in result['msg']


def test_pin_variant_digest_present(tmp_path):
    podman, state = fake_podman(tmp_path, [image('a', D1, 1)])
    rc, result = run_module('image_pin', {'reference': REPO + ':v1', 'digest': D1, 'executable': podman,
                                          'record_path': str(tmp_path / 'none.json')}, tmp_path=tmp_path)
    assert rc == 0, result
    assert result['changed'] is False
    assert result['present'] is True
    assert result['pinned_reference'] == REPO + '@' + D1
    assert load_state(state)['calls'] == [['image', 'exists', REPO + '@' + D1]]


def test_pin_uses_record_for_same_tag_and_not_present(tmp_path):
    podman, dummy = fake_podman(tmp_path, [image('a', D1, 1)])
    record = tmp_path / 'resolved.json'
    record.write_text(json.dumps({'reference': REPO + ':v2', 'digest': D2, 'pinned_reference': REPO + '@' + D2,
                                  'previous': REPO + '@' + D1, 'source': 'resolved',
                                  'resolved_from': REPO + ':v2'}))
    rc, result = run_module('image_pin', {'reference': REPO + ':v2', 'executable': podman,
                                          'record_path': str(record)}, tmp_path=tmp_path, check_mode=True)
    assert rc == 0, result
    assert (result['digest'], result['source'], result['present']) == (D2, 'record', False)
    assert result['previous'] == REPO + '@' + D1
    assert result['recorded']['digest'] == D2


def test_pin_unreadable_record_warns_and_resolves(tmp_path):
    podman, state = fake_podman(tmp_path, [])
    record = tmp_path / 'resolved.json'
    record.write_text('{not json')
    rc, result = run_module('image_pin', {'reference': REPO + ':v2', 'executable': podman,
                                          'record_path': str(record)}, tmp_path=tmp_path)
    assert rc == 0, result
    assert result['resolve_needed'] is True and result['present'] is False
    assert 'unreadable image record' in json.dumps(result.get('warnings', []))
    assert load_state(state).get('calls', []) == []  # nothing to look up without a digest


# --- image_prune ----------------------------------------------------------------------------

def prune_args(podman, **extra):
    args = {'repositories': [REPO], 'keep': 2, 'executable': podman}
    args.update(extra)
    return args


def test_prune_check_mode_removes_nothing(tmp_path):
    podman, state = fake_podman(tmp_path, [image('a', D1, 1), image('b', D2, 2), image('c', D3, 3)])
    rc, result = run_module('image_prune', prune_args(podman, target_digest=D4, protect=[D2]),
                            tmp_path=tmp_path, check_mode=True)
    assert rc == 0, result
    assert result['changed'] is True
    assert sorted(r['id'][0] for r in result['removed']) == ['a', 'c']
    assert len(load_state(state)['images']) == 3
    assert not any(call[0] == 'rmi' for call in load_state(state)['calls'])


def test_prune_removes_and_second_run_is_unchanged(tmp_path):
    podman, state = fake_podman(tmp_path, [image('a', D1, 1), image('b', D2, 2), image('c', D3, 3)],
                                containers=[{'Names': ['old'], 'ImageID': 'a' * 64}])
    rc, result = run_module('image_prune', prune_args(podman, target_digest=D4, protect=[D2]), tmp_path=tmp_path)
    assert rc == 0, result
    assert [r['id'][0] for r in result['removed']] == ['c']
    assert sorted(i['Id'][0] for i in load_state(state)['images']) == ['a', 'b']
    rc, again = run_module('image_prune', prune_args(podman, target_digest=D4, protect=[D2]), tmp_path=tmp_path)
    assert rc == 0 and again['changed'] is False and again['removed'] == []


def test_prune_reports_rmi_failure(tmp_path):
    podman, dummy = fake_podman(tmp_path, [image('a', D1, 1), image('b', D2, 2)], refuse_rmi=['a' * 64])
    rc, result = run_module('image_prune', prune_args(podman, keep=1, target_digest=D2), tmp_path=tmp_path)
    assert rc == 1
    assert 'could not remove old image aaaaaaaaaaaa' in result['msg']
    assert 'used by container' in result['msg']


def test_prune_rejects_bad_input(tmp_path):
    podman, dummy = fake_podman(tmp_path, [])
    rc, result = run_module('image_prune', prune_args(podman, keep=0), tmp_path=tmp_path)
    assert rc == 1 and 'at least 1' in result['msg']
    rc, result = run_module('image_prune', prune_args(podman, target_digest='latest'), tmp_path=tmp_path)
    assert rc == 1 and 'not a sha256 digest' in result['msg']
