#!/usr/bin/env bash
# Start the lab registry: container lab-registry on the lab network, Debian's
# docker-registry (distribution 2.8) with TLS from the lab CA and htpasswd auth,
# reachable as lab-registry:5000 from the fleet and 127.0.0.1:5000 from this machine.
# Images live in lab/.state/registry/data and survive `lab.sh down`.
# Idempotent: leaves a running registry alone when its settings did not change.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

pki=$LAB_STATE/pki
reg=$LAB_STATE/registry
mkdir -p "$reg/data" "$reg/auth"
chmod 0700 "$reg/auth"

user=$(lab_setting lab_registry_username)
password=$(lab_setting lab_registry_password)

# htpasswd with bcrypt (-B), as the registry requires; remade only when the
# credentials change (bcrypt salts, so compare by verifying, not by text).
if [ ! -s "$reg/auth/htpasswd" ] || ! htpasswd -vb "$reg/auth/htpasswd" "$user" "$password" >/dev/null 2>&1; then
  if command -v htpasswd >/dev/null; then
    htpasswd -Bbn "$user" "$password" > "$reg/auth/htpasswd.new"
  else
    podman run --rm --network none "$LAB_IMAGE" htpasswd -Bbn "$user" "$password" > "$reg/auth/htpasswd.new"
  fi
  mv "$reg/auth/htpasswd.new" "$reg/auth/htpasswd"
  chmod 0644 "$reg/auth/htpasswd"
fi

# The settings that need a new container when they change.
want=$(file_sha "$0" "$lab_dir/registry/config.yml" "$pki/registry.crt" "$reg/auth/htpasswd"; podman image inspect --format "{{.Id}}" "$LAB_IMAGE")
have=$(podman container inspect --format '{{index .Config.Labels "io.inkling.lab.config"}}' "$LAB_REGISTRY" 2>/dev/null || true)
if container_running "$LAB_REGISTRY" && [ "$have" = "$want" ]; then
  exit 0
fi
if container_exists "$LAB_REGISTRY"; then
  log "replacing $LAB_REGISTRY (settings changed or not running)"
  podman rm -f -t 5 "$LAB_REGISTRY" >/dev/null
fi

log "starting $LAB_REGISTRY ($LAB_REGISTRY:$LAB_REGISTRY_PORT, 127.0.0.1:$LAB_REGISTRY_PORT)"
podman run -d --name "$LAB_REGISTRY" --hostname "$LAB_REGISTRY" \
  --label "$LAB_LABEL" --label "io.inkling.lab.config=$want" \
  --network "$LAB_NETWORK" --cap-add NET_ADMIN \
  --publish "127.0.0.1:$LAB_REGISTRY_PORT:5000" \
  --volume "$lab_dir/registry/config.yml:/etc/lab-registry/config.yml:ro" \
  --volume "$pki/registry.crt:/etc/lab-registry/tls/registry.crt:ro" \
  --volume "$pki/registry.key:/etc/lab-registry/tls/registry.key:ro" \
  --volume "$reg/auth:/etc/lab-registry/auth:ro" \
  --volume "$reg/data:/var/lib/docker-registry" \
  "$LAB_IMAGE" docker-registry serve /etc/lab-registry/config.yml >/dev/null

# Ready when the API answers over TLS and asks for credentials (401 without them).
for _ in $(seq 1 100); do
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$pki/ca.crt" \
    "https://127.0.0.1:$LAB_REGISTRY_PORT/v2/" || true)
  if [ "$code" = 401 ]; then
    exit 0
  fi
  if ! container_running "$LAB_REGISTRY"; then
    podman logs --tail 20 "$LAB_REGISTRY" >&2 || true
    die "$LAB_REGISTRY exited; its log is above"
  fi
  sleep 0.1
done
podman logs --tail 20 "$LAB_REGISTRY" >&2 || true
die "$LAB_REGISTRY did not answer on https://127.0.0.1:$LAB_REGISTRY_PORT/v2/ within 10 s (last HTTP code: $code)"
