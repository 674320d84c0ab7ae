#!/usr/bin/env bash
# SSH access to lab hosts as a real fleet is reached: an unprivileged account with
# passwordless sudo on each host, and on the controller a key, a known_hosts file and an
# ssh config. Host key checking stays on: each host's key is read through podman (a
# channel the controller already trusts), never accepted on first use.
# Usage: ssh.sh DIR HOST...
#   DIR gets id_ed25519 (made once), known_hosts and config (rewritten for the HOSTs given:
#   Host HOST -> its address on the lab network, HostKeyAlias HOST, the account, the key).
#   Ansible and testinfra use it with `-F DIR/config` (inventory/lab, molecule).
# Idempotent: a host that already has the account and the key is only read.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || die "usage: ssh.sh DIR HOST..."
dir=$1
shift
mkdir -p "$dir"
chmod 0700 "$dir"
dir=$(cd "$dir" && pwd)
user=$LAB_SSH_USER
key=$dir/id_ed25519
if [ ! -f "$key" ]; then
  ssh-keygen -q -t ed25519 -N '' -C "inkling-lab-controller" -f "$key"
fi

known=$(mktemp "$dir/.known_hosts.XXXXXX")
config=$(mktemp "$dir/.config.XXXXXX")
trap 'rm -f "$known" "$config"' EXIT
for h in "$@"; do
  container_running "$h" || die "$h is not running (lab/lab.sh up, or molecule create)"
  # On the host, as root through podman: the account, its key, sudo, sshd; prints the host key.
  hostkey=$(podman exec -i -e LAB_SSH_USER="$user" "$h" bash -euo pipefail -c '
    command -v sshd >/dev/null || { echo "no sshd in this host image: rebuild it (FORCE=1 lab/images/build-host-image.sh)" >&2; exit 3; }
    id -u "$LAB_SSH_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$LAB_SSH_USER"
    home=$(getent passwd "$LAB_SSH_USER" | cut -d: -f6)
    install -d -m 0700 -o "$LAB_SSH_USER" -g "$LAB_SSH_USER" "$home/.ssh"
    cat > "$home/.ssh/authorized_keys.new"
    chown "$LAB_SSH_USER:" "$home/.ssh/authorized_keys.new"
    chmod 0600 "$home/.ssh/authorized_keys.new"
    mv "$home/.ssh/authorized_keys.new" "$home/.ssh/authorized_keys"
    printf "%s ALL=(ALL) NOPASSWD: ALL\n" "$LAB_SSH_USER" > /etc/sudoers.d/90-inkling-lab
    chmod 0440 /etc/sudoers.d/90-inkling-lab
    systemctl is-active --quiet ssh || systemctl restart ssh
    for _ in $(seq 50); do [ -s /etc/ssh/ssh_host_ed25519_key.pub ] && break; sleep 0.1; done
    systemctl is-active --quiet ssh || { systemctl status ssh --no-pager >&2; exit 4; }
    cut -d" " -f1,2 /etc/ssh/ssh_host_ed25519_key.pub' < "$key.pub") ||
    die "$h: could not set up SSH access (output above)"
  addr=$(podman container inspect --format "{{(index .NetworkSettings.Networks \"$LAB_NETWORK\").IPAddress}}" "$h" 2>/dev/null || true)
  [ -n "$addr" ] || addr=$(podman container inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$h" | cut -d' ' -f1)
  [ -n "$addr" ] || die "$h has no address on a podman network"
  printf '%s %s\n' "$h" "$hostkey" >> "$known"
  printf 'Host %s\n  HostName %s\n  HostKeyAlias %s\n\n' "$h" "$addr" "$h" >> "$config"
done
cat >> "$config" <<EOF
Host *
  User $user
  IdentityFile $key
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  PasswordAuthentication no
  BatchMode yes
EOF
chmod 0600 "$known" "$config"
mv "$known" "$dir/known_hosts"
mv "$config" "$dir/config"
trap - EXIT
log "ssh: $# host(s) reachable as $user with sudo (ssh -F $dir/config HOST)"
