#!/usr/bin/env bash
# Start the simulated fleet hosts: one systemd container per host (systemd as PID 1,
# privileged so that podman runs inside it), on the lab network, named and
# hostnamed as in inventory/lab/hosts.yml. Waits until systemd has booted.
# Usage: hosts.sh [HOST...]   (default: every host in LAB_HOSTS)
# Idempotent: a running host is left alone; a stopped one is replaced by a fresh one.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=("${LAB_HOSTS[@]}")
timeout_s=${LAB_BOOT_TIMEOUT:-180}

for h in "${hosts[@]}"; do
  if container_running "$h"; then
    continue
  fi
  if container_exists "$h"; then
    log "$h exists but is not running: replacing it with a fresh host"
    podman rm -f -t 5 "$h" >/dev/null
  fi
  log "starting host $h"
  podman run -d --name "$h" --hostname "$h" \
    --label "$LAB_LABEL" --label io.inkling.lab.role=host \
    --network "$LAB_NETWORK" \
    --systemd=always --privileged \
    --env PODMAN_IGNORE_CGROUPSV1_WARNING=1 \
    "$LAB_IMAGE" /sbin/init >/dev/null
done

# systemd reports `running`, or `degraded` on trixie in a container (only
# systemd-modules-load.service fails there, harmlessly).
deadline=$((SECONDS + timeout_s))
pending=("${hosts[@]}")
while [ ${#pending[@]} -gt 0 ]; do
  still=()
  for h in "${pending[@]}"; do
    state=$(podman exec "$h" systemctl is-system-running 2>/dev/null || true)
    case $state in
      running|degraded) ;;
      *) still+=("$h") ;;
    esac
  done
  pending=("${still[@]+"${still[@]}"}")
  [ ${#pending[@]} -gt 0 ] || break
  if [ $SECONDS -ge $deadline ]; then
    for h in "${pending[@]}"; do
      warn "$h: systemctl is-system-running = $(podman exec "$h" systemctl is-system-running 2>&1 || true)"
      podman exec "$h" systemctl --failed --no-pager >&2 2>&1 || true
    done
    die "hosts not booted within ${timeout_s} s: ${pending[*]} (expected systemd state running or degraded)"
  fi
  sleep 0.5
done
