#!/usr/bin/python3
"""Make a tiny OCI image, push it to a registry over the distribution API and
write the same bytes as an OCI archive (test fixture of the image scenario).

No image can be pulled on the lab machines and `podman push` recompresses
layers (the registry digest would differ from a saved archive), so the image
is written here byte for byte: the manifest digest is the same in the
registry and in the archive, as with `skopeo copy docker://... oci-archive:`.
Prints {"digest": "sha256:...", "reference": "..."} as JSON.
"""
import argparse
import base64
import gzip
import hashlib
import io
import json
import ssl
import tarfile
import urllib.request

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _tar_bytes(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(content, created):
    layer_tar = _tar_bytes([("inkling-stub/VERSION", content.encode() + b"\n")])
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": created,
        "config": {"Cmd": ["/bin/sh"], "Labels": {"io.inkling.stub": content}},
        "rootfs": {"type": "layers", "diff_ids": [_sha(layer_tar)]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _sha(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _sha(layer), "size": len(layer)}],
    }, sort_keys=True).encode()
    return {"layer": layer, "config": config, "manifest": manifest}


def push(args, blobs):
    ctx = ssl.create_default_context(cafile=args.cafile)
    token = base64.b64encode(("%s:%s" % (args.username, args.password)).encode()).decode()
    base = "https://%s/v2/%s" % (args.registry, args.repository)

    def call(method, url, data=None, headers=None):
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        req.add_header("Authorization", "Basic " + token)
        return urllib.request.urlopen(req, context=ctx, timeout=30)

    for blob in (blobs["layer"], blobs["config"]):
        with call("POST", base + "/blobs/uploads/") as resp:
            location = resp.headers["Location"]
        if location.startswith("/"):
            location = "https://%s%s" % (args.registry, location)
        sep = "&" if "?" in location else "?"
        call("PUT", location + sep + "digest=" + _sha(blob), data=blob,
             headers={"Content-Type": "application/octet-stream"}).close()
    with call("PUT", "%s/manifests/%s" % (base, args.tag), data=blobs["manifest"],
              headers={"Content-Type": OCI_MANIFEST}) as resp:
        return resp.headers["Docker-Content-Digest"]


def write_archive(path, blobs, ref_name):
    manifest = blobs["manifest"]
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": _sha(manifest), "size": len(manifest),
                       "annotations": {"org.opencontainers.image.ref.name": ref_name}}],
    }).encode()
    members = [("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'), ("index.json", index)]
    members += [("blobs/sha256/" + _sha(b)[7:], b) for b in blobs.values()]
    with open(path, "wb") as out:
        out.write(_tar_bytes(members))


def main():
    parser = argparse.ArgumentParser()
    for opt in ("registry", "repository", "tag", "username", "password", "cafile", "content"):
        parser.add_argument("--" + opt, required=True)
    parser.add_argument("--archive")
    parser.add_argument("--created", default="2026-01-01T00:00:00Z")
    args = parser.parse_args()
    blobs = build(args.content, args.created)
    digest = push(args, blobs)
    if digest != _sha(blobs["manifest"]):
        raise SystemExit("registry digest %s differs from the manifest's %s" % (digest, _sha(blobs["manifest"])))
    reference = "%s/%s:%s" % (args.registry, args.repository, args.tag)
    if args.archive:
        write_archive(args.archive, blobs, reference)
    print(json.dumps({"digest": digest, "reference": reference, "content": args.content}))


if __name__ == "__main__":
    main()
