#!/usr/bin/env bash
# Make the lab CA and the registry's server certificate under lab/.state/pki/.
# The CA stands in for a site's internal CA; hosts trust it through
# /etc/containers/certs.d/lab-registry:5000/ca.crt (lab/playbooks/prepare-hosts.yml).
# Idempotent: keeps an existing CA and certificate while they are valid for a week more.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

pki=$LAB_STATE/pki
mkdir -p "$pki"
chmod 0700 "$pki"

if [ -s "$pki/ca.crt" ] && [ -s "$pki/registry.crt" ] &&
   openssl x509 -checkend 604800 -noout -in "$pki/ca.crt" >/dev/null &&
   openssl x509 -checkend 604800 -noout -in "$pki/registry.crt" >/dev/null &&
   openssl verify -CAfile "$pki/ca.crt" "$pki/registry.crt" >/dev/null 2>&1; then
  fresh=0
else
  fresh=1
fi

if [ "$fresh" = 1 ]; then
  log "making the lab CA and the $LAB_REGISTRY certificate ($pki)"
  umask 077
  openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 825 \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" \
    -subj "/O=inkling.fleet lab/CN=inkling lab CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -new -nodes -newkey rsa:2048 -sha256 \
    -keyout "$pki/registry.key" -out "$pki/registry.csr" \
    -subj "/O=inkling.fleet lab/CN=$LAB_REGISTRY" 2>/dev/null
  cat > "$pki/registry.ext" <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$LAB_REGISTRY,DNS:localhost,IP:127.0.0.1
EOF
  openssl x509 -req -sha256 -days 397 -in "$pki/registry.csr" \
    -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -extfile "$pki/registry.ext" -out "$pki/registry.crt" 2>/dev/null
  rm -f "$pki/registry.csr"
  # The certificates are public; the keys stay 0600.
  chmod 0644 "$pki/ca.crt" "$pki/registry.crt"
fi

# podman --cert-dir reads DIR/ca.crt; one directory per name the registry is reached by.
for name in "127.0.0.1:$LAB_REGISTRY_PORT" "$LAB_REGISTRY:$LAB_REGISTRY_PORT"; do
  mkdir -p "$pki/certs.d/$name"
  cp "$pki/ca.crt" "$pki/certs.d/$name/ca.crt"
done
chmod -R go+rX "$pki/certs.d"
