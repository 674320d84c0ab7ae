# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""image_ref: fully qualified references (F12), digests, pinning decisions and prune choice."""

import pytest

from ansible_collections.inkling.fleet.plugins.module_utils import image_ref as ir

D1 = 'sha256:' + '1' * 64
D2 = 'sha256:' + '2' * 64
D3 = 'sha256:' + '3' * 64
D4 = 'sha256:' + '4' * 64
D5 = 'sha256:' + '5' * 64
REPO = 'quay.io/vllm/automation-vllm'


@pytest.mark.parametrize('ref, expected', [
    ('quay.io/vllm/automation-vllm:cuda-29455473553', ('quay.io', 'vllm/automation-vllm', 'cuda-29455473553', None)),
    ('docker.io/vllm/vllm-openai@' + D1, ('docker.io', 'vllm/vllm-openai', None, D1)),
    ('registry.example.com:5000/a/b/c:v1@' + D2, ('registry.example.com:5000', 'a/b/c', 'v1', D2)),
    ('localhost/inkling-lab-host:trixie', ('localhost', 'inkling-lab-host', 'trixie', None)),
    ('lab-registry:5000/inkling/vllm-standin', ('lab-registry:5000', 'inkling/vllm-standin', None, None)),
    ('[fd00::1]:5000/x/y:1', ('[fd00::1]:5000', 'x/y', '1', None)),
    ('nvcr.io/nvidia/vllm:25.09-py3', ('nvcr.io', 'nvidia/vllm', '25.09-py3', None)),
])
def test_parse_fully_qualified(ref, expected):
    parsed = ir.parse_reference(ref)
    assert tuple(parsed) == expected
    assert str(parsed) == ref
    assert parsed.repository == expected[0] + '/' + expected[1]


@pytest.mark.parametrize('ref', [
    'vllm/vllm-openai:v0.10.1',          # the F12 test input
    'vllm-openai',
    'vllm-openai:latest',
    'library/ubuntu@' + D1,
    'lab-registry/inkling/stub:1',       # a host without dot or port reads as a namespace
])
def test_short_names_are_refused_with_remedy(ref):
    with pytest.raises(ir.ImageRefError) as err:
        ir.parse_reference(ref)
    msg = str(err.value)
    assert 'short name' in msg
    assert ref in msg
    assert 'short-name resolution enforced but cannot prompt without a TTY' in msg
    assert 'docker.io/' in msg and 'sha256:' in msg  # remedy and a fully qualified example


@pytest.mark.parametrize('ref, needle', [
    ('', 'empty'),
    ('quay.io/a/b:tag with space', 'white space'),
    ('docker://quay.io/a/b:1', 'transport'),
    ('quay.io/a/b@sha256:abc', 'not a sha256 digest'),
    ('quay.io/a/b@sha512:' + 'a' * 128, 'not a sha256 digest'),
    ('quay.io/a/b@sha256:' + 'A' * 64, 'not a sha256 digest'),
    ('quay.io/a/b:-bad', 'invalid tag'),
    ('quay.io/a/b:' + 'x' * 129, 'invalid tag'),
    ('quay.io/A/b:1', 'invalid path component'),
    ('quay.io/a//b:1', 'invalid path component'),
])
def test_malformed_references(ref, needle):
    with pytest.raises(ir.ImageRefError) as err:
        ir.parse_reference(ref)
    assert needle in str(err.value)


def test_non_string_reference():
    with pytest.raises(ir.ImageRefError):
        ir.parse_reference(None)


def test_pinned_and_tagged():
    ref = ir.parse_reference(REPO + ':v1')
    assert ref.pinned(D1) == REPO + '@' + D1
    assert ref.tagged() == REPO + ':v1'
    assert ir.parse_reference(REPO).tagged() == REPO + ':latest'
    with pytest.raises(ir.ImageRefError):
        ref.pinned()
    with pytest.raises(ir.ImageRefError):
        ref.pinned('sha256:short')
    assert ir.parse_reference(REPO + ':v1@' + D2).pinned() == REPO + '@' + D2


def test_validate_digest():
    assert ir.validate_digest(D1) == D1
    for bad in (None, '', '1' * 64, 'sha256:' + '1' * 63, 'md5:' + '1' * 32):
        with pytest.raises(ir.ImageRefError):
            ir.validate_digest(bad)


def test_repository_of():
    assert ir.repository_of(REPO + '@' + D1) == REPO
    assert ir.repository_of(REPO + ':v1') == REPO
    assert ir.repository_of('<none>:<none>') is None


# --- plan_pin -------------------------------------------------------------------------------

def test_plan_tag_without_record_needs_resolution():
    plan = ir.plan_pin(REPO + ':v1')
    assert plan['resolve_needed'] is True
    assert plan['digest'] is None and plan['pinned_reference'] is None and plan['record'] is None
    assert plan['tagged_reference'] == REPO + ':v1'
    assert plan['previous'] is None


def test_plan_variant_digest():
    plan = ir.plan_pin(REPO + ':v1', digest=D1)
    assert (plan['digest'], plan['source'], plan['resolve_needed']) == (D1, 'variant', False)
    assert plan['pinned_reference'] == REPO + '@' + D1
    assert plan['record'] == {'reference': REPO + ':v1', 'digest': D1, 'pinned_reference': REPO + '@' + D1,
                              'previous': None, 'source': 'variant', 'resolved_from': None}


def test_plan_digest_in_reference_and_conflict():
    plan = ir.plan_pin(REPO + '@' + D2)
    assert (plan['digest'], plan['source']) == (D2, 'reference')
    assert ir.plan_pin(REPO + '@' + D2, digest=D2)['digest'] == D2
    with pytest.raises(ir.ImageRefError) as err:
        ir.plan_pin(REPO + '@' + D2, digest=D1)
    assert D1 in str(err.value) and D2 in str(err.value)


def test_plan_bad_variant_digest():
    with pytest.raises(ir.ImageRefError) as err:
        ir.plan_pin(REPO + ':v1', digest='latest')
    assert 'variant image digest' in str(err.value)


def test_plan_resolved_tag_is_recorded_then_reused():
    first = ir.plan_pin(REPO + ':v1', resolved_digest=D3)
    assert first['source'] == 'resolved'
    assert first['record']['resolved_from'] == REPO + ':v1'
    # Next run: the same reference uses the recorded digest, no resolution.
    again = ir.plan_pin(REPO + ':v1', record=first['record'])
    assert (again['digest'], again['source'], again['resolve_needed']) == (D3, 'record', False)
    assert again['record'] == first['record']  # nothing to rewrite: idempotent


def test_plan_changed_reference_resolves_again_and_keeps_previous():
    record = ir.plan_pin(REPO + ':v1', resolved_digest=D3)['record']
    plan = ir.plan_pin(REPO + ':v2', record=record)
    assert plan['resolve_needed'] is True
    assert plan['previous'] == REPO + '@' + D3
    resolved = ir.plan_pin(REPO + ':v2', record=record, resolved_digest=D4)
    assert resolved['previous'] == REPO + '@' + D3
    assert resolved['record']['previous'] == REPO + '@' + D3
    assert resolved['record']['pinned_reference'] == REPO + '@' + D4


def test_plan_previous_survives_reruns():
    rec1 = ir.plan_pin(REPO + ':v1', digest=D1)['record']
    rec2 = ir.plan_pin(REPO + ':v2', digest=D2, record=rec1)['record']
    assert rec2['previous'] == REPO + '@' + D1
    rec3 = ir.plan_pin(REPO + ':v2', digest=D2, record=rec2)['record']
    assert rec3 == rec2


def test_plan_same_tag_new_variant_digest_wins_over_record():
    rec = ir.plan_pin(REPO + ':v1', resolved_digest=D3)['record']
    plan = ir.plan_pin(REPO + ':v1', digest=D4, record=rec)
    assert (plan['digest'], plan['source']) == (D4, 'variant')
    assert plan['previous'] == REPO + '@' + D3


def test_plan_ignores_a_corrupt_record_digest():
    plan = ir.plan_pin(REPO + ':v1', record={'reference': REPO + ':v1', 'digest': 'garbage'})
    assert plan['resolve_needed'] is True
    assert ir.plan_pin(REPO + ':v1', record=['not', 'a', 'dict'])['resolve_needed'] is True


# --- select_prune ---------------------------------------------------------------------------

def img(ident, digest, created, repo=REPO, names=None):
    return {'Id': ident * 64, 'Digest': digest, 'RepoDigests': ['%s@%s' % (repo, digest)],
            'Names': names if names is not None else ['%s@%s' % (repo, digest)], 'Created': created}


def ids(entries):
    return sorted(e['id'][0] for e in entries)


def test_prune_keeps_target_slot_and_rollback():
    images = [img('a', D1, 100), img('b', D2, 200), img('c', D3, 300)]
    remove, kept = ir.select_prune(images, [REPO], 2, target_digest=D5, protect_digests=[D2])
    # Target not yet pulled: one slot reserved, one for the rollback target D2, even though D3 is newer.
    assert ids(kept) == ['b']
    assert ids(remove) == ['a', 'c']
    assert all('image_keep=2' in r['reason'] for r in remove)


def test_prune_newest_fill_without_protection():
    images = [img('a', D1, 100), img('b', D2, 200), img('c', D3, 300)]
    remove, kept = ir.select_prune(images, [REPO], 3)
    assert ids(kept) == ['b', 'c']
    assert ids(remove) == ['a']


def test_prune_target_present_counts_once():
    images = [img('a', D1, 100), img('b', D2, 200), img('c', D3, 300)]
    remove, kept = ir.select_prune(images, [REPO], 2, target_digest=D3, protect_digests=[D3, D1])
    assert ids(kept) == ['a', 'c']
    assert ids(remove) == ['b']


def test_prune_never_removes_in_use_images():
    images = [img('a', D1, 100), img('b', D2, 200), img('c', D3, 300)]
    remove, kept = ir.select_prune(images, [REPO], 1, target_digest=D3, in_use_ids=['a' * 64, None])
    assert ids(kept) == ['a', 'c']
    assert ids(remove) == ['b']
    assert [k['reason'] for k in kept if k['id'][0] == 'a'] == ['used by a container']


def test_prune_in_use_does_not_take_the_rollback_slot():
    # The molecule scenario: a stray container uses D1, D3 is the rollback target.
    images = [img('a', D1, 100), img('b', D2, 200), img('c', D3, 300)]
    remove, kept = ir.select_prune(images, [REPO], 2, target_digest=D4, in_use_ids=['a' * 64],
                                   protect_digests=[D3, D2])
    assert ids(kept) == ['a', 'c']
    assert ids(remove) == ['b']


def test_prune_only_touches_given_repositories():
    other = img('o', D5, 1, repo='quay.io/someone/else')
    unnamed = {'Id': 'n' * 64, 'Digest': D4, 'RepoDigests': [], 'Names': [], 'Created': 0}
    images = [img('a', D1, 100), img('b', D2, 200), other, unnamed]
    remove, kept = ir.select_prune(images, [REPO], 1, target_digest=D2)
    assert ids(remove) == ['a']
    assert ids(kept) == ['b']


def test_prune_matches_tagged_names_and_old_repository():
    old_repo = 'quay.io/vllm/old-name'
    images = [img('a', D1, 100, names=[REPO + ':v1']), img('b', D2, 200, repo=old_repo)]
    remove, kept = ir.select_prune(images, [REPO, old_repo], 2, target_digest=D3, protect_digests=[D2])
    assert ids(kept) == ['b']
    assert ids(remove) == ['a']


def test_prune_keep_must_be_positive():
    with pytest.raises(ValueError):
        ir.select_prune([], [REPO], 0)


def test_prune_nothing_to_do_is_stable():
    images = [img('a', D1, 100), img('b', D2, 200)]
    remove, kept = ir.select_prune(images, [REPO], 2, target_digest=D2, protect_digests=[D2, D1])
    assert remove == []
    assert ids(kept) == ['a', 'b']
