"""Verify inkling.fleet.image on the molecule hosts (pytest-testinfra).

mol-img-01 pulled stubs 1-3 by digest in prepare (a container uses stub 1) and
stub 4 by tag in converge; mol-img-02 loaded stub 4 from an OCI archive with no
network at all. The expected digests come from the registry (digests.json,
written by prepare from the registry's Docker-Content-Digest headers).
"""
import base64
import json
import os

import pytest
import testinfra
import testinfra.utils.ansible_runner

REGISTRY = "mol-img-registry:5000"
REPO = REGISTRY + "/inkling/stub"
AUTH_FILE = "/etc/inkling/registry-auth.json"
RECORD = "/var/lib/inkling/image/resolved.json"


@pytest.fixture(scope="module")
def digests():
    path = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "digests.json")
    with open(path) as handle:
        return json.load(handle)


def _platform(name):
    """The scenario's host NAME; an error (not a skip) when the scenario has no such platform."""
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    names = testinfra.utils.ansible_runner.AnsibleRunner(inventory).get_hosts("all")
    assert name in names, "platform %s is missing from the scenario (it has %s)" % (name, sorted(names))
    return testinfra.get_host("ansible://" + name, ansible_inventory=inventory)


@pytest.fixture(scope="module")
def online():
    """mol-img-01: pulls from the scenario's registry."""
    return _platform("mol-img-01")


@pytest.fixture(scope="module")
def airgapped():
    """mol-img-02: no network; loads an OCI archive."""
    return _platform("mol-img-02")


def _podman(host, *args):
    cmd = host.run("PODMAN_IGNORE_CGROUPSV1_WARNING=1 podman " + " ".join(args))
    return cmd


def _images(host):
    out = _podman(host, "images", "--format", "json")
    assert out.rc == 0, out.stderr
    return json.loads(out.stdout)


def _has_digest(images, digest):
    return any(img.get("Digest") == digest or any(rd.endswith("@" + digest) for rd in img.get("RepoDigests") or [])
               for img in images)


def _json(host, path):
    f = host.file(path)
    assert f.exists, path
    return json.loads(f.content_string)


def test_online_record_pins_the_resolved_tag(online, digests):
    host = online
    record = _json(host, RECORD)
    assert record["reference"] == REPO + ":4"
    assert record["digest"] == digests["stub:4"]
    assert record["pinned_reference"] == REPO + "@" + digests["stub:4"]
    assert record["source"] == "resolved"
    assert record["resolved_from"] == REPO + ":4"
    # The rollback target is the image deployed before (stub 3, by digest).
    assert record["previous"] == REPO + "@" + digests["stub:3"]
    published = _json(host, "/var/lib/inkling-test/image_pinned.json")
    assert published == {
        "reference": REPO + ":4",
        "digest": digests["stub:4"],
        "pinned_reference": REPO + "@" + digests["stub:4"],
        "previous": REPO + "@" + digests["stub:3"],
    }


def test_online_keeps_current_previous_and_in_use(online, digests):
    host = online
    images = _images(host)
    assert _has_digest(images, digests["stub:4"]), "current image missing"
    assert _has_digest(images, digests["stub:3"]), "rollback image pruned"
    assert _has_digest(images, digests["stub:1"]), "image used by a container pruned"
    assert not _has_digest(images, digests["stub:2"]), "stub 2 is beyond image_keep=2 and should be pruned"
    assert _has_digest(images, digests["other:1"]), "an image of another repository was touched"
    stub_images = [img for img in images if any(n.startswith(REPO) for n in (img.get("Names") or []))]
    assert len(stub_images) == 3
    assert _podman(host, "image", "exists", REPO + "@" + digests["stub:4"]).rc == 0


def test_online_auth_file_root_only(online):
    host = online
    f = host.file(AUTH_FILE)
    assert f.is_file
    assert f.user == "root" and f.group == "root"
    assert f.mode == 0o600
    auths = json.loads(f.content_string)["auths"]
    assert list(auths) == [REGISTRY]
    user, dummy, password = base64.b64decode(auths[REGISTRY]["auth"]).decode().partition(":")
    assert user == "inkling-test" and password
    # The credentials work for a pull through this file (what the service unit will use).
    out = _podman(host, "pull", "--authfile", AUTH_FILE, REPO + ":1")
    assert out.rc == 0, out.stderr


def test_online_no_mirror_dropin(online):
    host = online
    assert not host.file("/etc/containers/registries.conf.d/50-inkling-mirror.conf").exists


def test_airgapped_loaded_archive_by_digest(airgapped, digests):
    host = airgapped
    # No registry reachable from this host at all.
    assert _podman(host, "pull", REPO + ":4").rc != 0
    record = _json(host, RECORD)
    assert record["digest"] == digests["stub:4"]
    assert record["source"] == "variant"
    assert record["previous"] is None
    assert _podman(host, "image", "exists", REPO + "@" + digests["stub:4"]).rc == 0
    assert not host.file(AUTH_FILE).exists
