#!/usr/bin/env bash
# Install everything inkling.fleet needs on a fresh Debian 12 machine, as root:
# Debian packages (podman, runc, debootstrap, ...), a virtualenv with the pinned
# Python requirements, and the link that makes `inkling.fleet.*` resolve from
# this checkout. Idempotent: a second run only checks.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

apt_pkgs=(podman runc crun debootstrap rsync iproute2 jq curl git make python3-venv uidmap slirp4netns)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$py" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python requirements into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  echo "$want" > "$stamp"
fi

mkdir -p collections/ansible_collections/inkling
ln -sfn ../../.. collections/ansible_collections/inkling/fleet
echo "setup: ready (.venv, collections/ansible_collections/inkling/fleet -> .)"
