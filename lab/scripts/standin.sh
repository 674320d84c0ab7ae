#!/usr/bin/env bash
# Build the vLLM stand-in images (lab/standin/build-image.sh) when they are missing,
# push them to the lab registry over TLS with credentials, and write their digests
# as YAML to lab/.state/generated/standin.yml for inventory/lab/group_vars/all/generated.yml.
# Idempotent: an image whose local id was already pushed, and whose manifest the
# registry still holds, is not pushed again.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

gen=$LAB_STATE/generated
pushed=$LAB_STATE/registry/pushed
mkdir -p "$gen" "$pushed"
out=$gen/standin.yml
rm -f "$out"

build=$lab_dir/standin/build-image.sh
if [ ! -x "$build" ]; then
  skip "vLLM stand-in not built: $build is missing (lab/standin/ not delivered yet); no image digests generated"
  exit 0
fi
"$build" >&2

user=$(lab_setting lab_registry_username)
password=$(lab_setting lab_registry_password)
outer=127.0.0.1:$LAB_REGISTRY_PORT
certs=$LAB_STATE/pki/certs.d/$outer

# manifest_present DIGEST: the registry serves that manifest (HTTP 200 to a HEAD).
manifest_present() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -I --cacert "$certs/ca.crt" -u "$user:$password" \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
    "https://$outer/v2/$LAB_STANDIN_REPO/manifests/$1" || true)
  [ "$code" = 200 ]
}

{
  echo "lab_generated_standin_image: $LAB_REGISTRY:$LAB_REGISTRY_PORT/$LAB_STANDIN_REPO"
} > "$out.new"
for tag in "${LAB_STANDIN_TAGS[@]}"; do
  local_ref=$LAB_STANDIN_LOCAL:$tag
  if ! podman image exists "$local_ref"; then
    rm -f "$out.new"
    die "$build ran but $local_ref does not exist"
  fi
  id=$(podman image inspect --format '{{.Id}}' "$local_ref")
  digest=""
  if [ -s "$pushed/$tag" ]; then
    read -r old_id old_digest < "$pushed/$tag" || true
    if [ "$old_id" = "$id" ] && manifest_present "$old_digest"; then
      digest=$old_digest
    fi
  fi
  if [ -z "$digest" ]; then
    log "pushing $local_ref to $outer/$LAB_STANDIN_REPO:$tag"
    podman push --quiet --cert-dir "$certs" --creds "$user:$password" \
      --digestfile "$pushed/$tag.digest" "$local_ref" "$outer/$LAB_STANDIN_REPO:$tag" >&2
    digest=$(cat "$pushed/$tag.digest")
    rm -f "$pushed/$tag.digest"
    case $digest in
      sha256:????????????????????????????????????????????????????????????????) ;;
      *) die "podman push of $local_ref gave no sha256 digest (got '$digest')" ;;
    esac
    manifest_present "$digest" || die "the registry does not serve $LAB_STANDIN_REPO@$digest right after the push"
    echo "$id $digest" > "$pushed/$tag"
  fi
  echo "lab_generated_standin_digest_${tag}: \"$digest\"" >> "$out.new"
done
mv "$out.new" "$out"
