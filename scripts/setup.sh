#!/usr/bin/env bash
# Install everything inkling.fleet needs on a fresh Debian 12 machine, as root:
# Debian packages (podman with its netavark network backend and aardvark-dns, runc,
# debootstrap, ...), a virtualenv with the pinned Python requirements, and the link
# that makes `inkling.fleet.*` resolve from this checkout. Then it checks each
# prerequisite the lab and the tests rely on and names the package that provides
# it when one is missing. Idempotent: a second run only checks.
#
# Every package is installed by name with --no-install-recommends: nothing may
# depend on what a Recommends line or an earlier install happened to bring.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$top/lab/conf/containers.conf}

# What each package is for (keep in step with docs/lab.md, "What the machine needs"):
apt_pkgs=(
  podman netavark aardvark-dns runc conmon uidmap slirp4netns iptables  # containers, their network and DNS
  debootstrap ca-certificates                                           # the lab's host image
  openssl                                                               # the lab's CA and registry certificate
  iproute2                                                              # tc shaping in benchmarks
  rsync                                                                 # hf_cache peer copy (unit tests run a real daemon)
  openssh-client                                                        # the controller reaches lab hosts over SSH
  shellcheck                                                            # ansible-test sanity's shellcheck test
  jq curl git make tar gzip                                             # scripts, sanity's git checkout
  python3 python3-venv python3-dev gcc                                  # the virtualenv (a few wheels build)
)

die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

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

# Prerequisites, each with the package that provides it.
check_cmd() { # check_cmd COMMAND PACKAGE WHAT
  command -v "$1" >/dev/null 2>&1 || die "$3: '$1' not found; install the Debian package '$2' (apt-get install --no-install-recommends $2)"
}
check_cmd podman podman "the container engine"
check_cmd runc runc "the OCI runtime the lab uses (crun refuses this machine's hybrid cgroups)"
check_cmd debootstrap debootstrap "the lab's host image builder"
check_cmd openssl openssl "the lab's CA"
check_cmd rsync rsync "the hf_cache peer copy"
check_cmd ssh openssh-client "the SSH client the controller reaches the lab hosts with"
check_cmd ssh-keygen openssh-client "the lab's controller key (lab/scripts/ssh.sh)"
check_cmd shellcheck shellcheck "ansible-test sanity's shellcheck test"
[ -x /usr/lib/podman/netavark ] || die "podman's network backend: /usr/lib/podman/netavark not found; install the Debian package 'netavark'"
[ -x /usr/lib/podman/aardvark-dns ] || die "DNS for podman networks (lab hosts resolve each other by name): /usr/lib/podman/aardvark-dns not found; install the Debian package 'aardvark-dns'"
backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>&1) ||
  die "'podman info' failed with CONTAINERS_CONF=$CONTAINERS_CONF: $(tail -n 1 <<<"$backend")"
[ "$backend" = netavark ] ||
  die "podman uses the '$backend' network backend, expected netavark (pinned in $CONTAINERS_CONF); install the Debian packages 'netavark' and 'aardvark-dns'"
runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null)
[ "$runtime" = runc ] ||
  die "podman uses the '$runtime' OCI runtime, expected runc (pinned in $CONTAINERS_CONF); install the Debian package 'runc'"

# pip trusts the machine's CA store (ca-certificates, plus any local CA an egress
# proxy needs) rather than its own bundle, like apt does.
export PIP_CERT=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
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
echo "setup: ready (podman $(podman version --format '{{.Client.Version}}'), network backend $backend, runtime $runtime, .venv, collections/ansible_collections/inkling/fleet -> .)"
