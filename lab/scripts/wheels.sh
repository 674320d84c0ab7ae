#!/usr/bin/env bash
# Download the wheels the hf_cache role installs on the hosts (huggingface_hub at the
# role's pinned version and its dependencies, for the hosts' Python 3.13) into
# lab/.state/wheels, and publish the directory as lab_generated_wheelhouse. The lab
# hosts have no trusted path to PyPI, so the lab inventory sets hf_cache_pip_wheelhouse
# to it (a real fleet with a package mirror leaves that empty).
# Idempotent: downloads only what is missing.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

wheels=$LAB_STATE/wheels
gen=$LAB_STATE/generated
mkdir -p "$wheels" "$gen"
version=$(sed -n 's/^hf_cache_huggingface_hub_version: *"\{0,1\}\([0-9.]*\)"\{0,1\}.*/\1/p' \
  "$repo_dir/roles/hf_cache/defaults/main.yml")
[ -n "$version" ] || die "cannot read hf_cache_huggingface_hub_version from roles/hf_cache/defaults/main.yml"
if [ ! -f "$wheels/huggingface_hub-$version-py3-none-any.whl" ]; then
  log "downloading huggingface_hub $version and its dependencies for the hosts into $wheels"
  "$LAB_PYTHON" -m pip download -q --only-binary=:all: --python-version 3.13 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$wheels" "huggingface_hub==$version"
fi
printf 'lab_generated_wheelhouse: %s\n' "$wheels" > "$gen/wheels.yml"
