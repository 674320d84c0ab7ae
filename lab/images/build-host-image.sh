#!/usr/bin/env bash
# Build the simulated GPU host image (Debian trixie, systemd as PID 1, podman 5.x
# with the quadlet generator, sshd and sudo) from Debian's packages with debootstrap.
# No image can be pulled on the lab machines, so every image is made locally.
# Idempotent: does nothing if the image exists with this script's version label
# (io.inkling.lab.host-image), unless FORCE=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/../conf/containers.conf}
image=${LAB_HOST_IMAGE:-localhost/inkling-lab-host:trixie}
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Bump when the image's contents change: an older image is rebuilt (lib.sh require_host_image).
version=2
if [ "$(podman image inspect --format '{{index .Labels "io.inkling.lab.host-image"}}' "$image" 2>/dev/null)" = "$version" ] &&
   [ "${FORCE:-0}" != 1 ]; then
  echo "lab: $image already present"
  exit 0
fi

pkgs=(python3 python3-venv python3-pip systemd systemd-sysv dbus podman crun
      netavark aardvark-dns conmon catatonit fuse-overlayfs iproute2 iputils-ping
      procps kmod pciutils rsync curl ca-certificates sudo less jq tar gzip
      util-linux coreutils e2fsprogs docker-registry apache2-utils openssl nftables
      openssh-server)
root=$(mktemp -d /var/tmp/inkling-lab-host.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "lab: debootstrap trixie into $root (a few minutes)"
debootstrap --variant=minbase --include="$(IFS=,; echo "${pkgs[*]}")" trixie "$root" "$mirror" >/dev/null
# Keep the image small: no downloaded .debs (about 100 MB), apt lists, docs or locales.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
# Each host makes its own SSH host keys when sshd first starts (lab/scripts/ssh.sh reads them
# through podman, so the controller's known_hosts never trusts on first use).
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
  > "$root/etc/systemd/system/ssh.service.d/10-inkling-lab-host-keys.conf"
echo "lab: importing $image"
tar -C "$root" -c . | podman import --change 'CMD ["/sbin/init"]' \
  --change "LABEL io.inkling.lab.host-image=$version" - "$image" >/dev/null
echo "lab: built $image"
