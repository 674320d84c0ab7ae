#!/usr/bin/env bash
# The README's set-up on a pristine Debian 12, whatever this machine has installed.
#
# A Debian 12 root filesystem made with debootstrap (minbase: not even python3 or
# podman) is cached under $FRESH_CACHE, keyed by what it is made of. Each run copies it,
# clones this checkout to /root/inkling-fleet (what a new user has: the committed tree,
# no .venv, no lab state), and runs as root inside it, as
# the root of namespaces of its own (mount, PID, network through slirp4netns, so apt and
# PyPI are reached but nothing of this machine's podman, networks or containers is seen):
#   1. scripts/setup.sh, exactly as README's commands run it;
#   2. lab/lab.sh up --services-only: the lab network with DNS, its CA, the registry,
#      the stand-in images, the hub;
#   3. from a container on the lab network: the registry and the hub resolve by name and
#      answer (registry: 401 without credentials over TLS; hub: the model's revision);
#   4. lab/lab.sh down.
# Nothing outlives the run: the namespaces end with it and the copy is removed.
#
#   bash scripts/fresh-machine.sh            (as root; about 5 minutes, + 1 for a cold cache)
# Environment: FRESH_CACHE (default /var/cache/inkling-fleet/fresh-machine),
# FRESH_DEBIAN_MIRROR (default http://deb.debian.org/debian), FRESH_TIMEOUT_S (1800),
# FRESH_COMMAND: run these commands inside instead of steps 1-4, e.g. the README's two:
#   FRESH_TIMEOUT_S=7200 FRESH_COMMAND='bash scripts/lab-deploy.sh && bash scripts/test.sh' \
#     bash scripts/fresh-machine.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

cache=${FRESH_CACHE:-/var/cache/inkling-fleet/fresh-machine}
mirror=${FRESH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
variant=minbase
limit=${FRESH_TIMEOUT_S:-1800}

log() { printf 'fresh: %s\n' "$*" >&2; }
die() { printf 'fresh: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and namespaces need it)"
for c in debootstrap unshare slirp4netns chroot ip; do
  command -v "$c" >/dev/null || die "'$c' not found: run scripts/setup.sh (it installs debootstrap, slirp4netns, iproute2)"
done

# 1. The pristine root filesystem, cached by what makes it.
key=$(printf '%s\n' "$suite" "$variant" "$mirror" "$(uname -m)" | sha256sum | cut -c1-16)
pristine=$cache/$suite-$variant-$key
if [ ! -x "$pristine/usr/bin/apt-get" ]; then
  log "making a pristine Debian 12 root filesystem with debootstrap ($suite, $variant), cached in $pristine"
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.new.XXXXXX")
  debootstrap --variant="$variant" "$suite" "$tmp" "$mirror" >/dev/null ||
    { rm -rf --one-file-system "$tmp"; die "debootstrap $suite failed"; }
  # What a fresh installation has besides the base: the updates and security suites.
  cat > "$tmp/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
EOF
  rm -rf "$tmp"/var/cache/apt/archives/*.deb
  mv "$tmp" "$pristine"
else
  log "pristine root filesystem from the cache: $pristine"
fi

# 2. A copy of it, with the checkout in it.
work=$(mktemp -d /var/tmp/inkling-fresh.XXXXXX)
chmod 0755 "$work"   # apt's sandbox user (_apt) must reach the root inside
root=$work/root
slirp_pid=
cleanup() {
  [ -n "$slirp_pid" ] && kill "$slirp_pid" 2>/dev/null
  # The namespaces' mounts went with them; never follow a mount when removing.
  if findmnt -rn -o TARGET | grep -q "^$work"; then
    log "WARNING: mounts left under $work; not removing it"
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
log "copying it to $root"
cp -a "$pristine" "$root"
chmod 0755 "$root"
if chroot "$root" /bin/sh -c 'command -v podman || command -v python3' >/dev/null; then
  die "the cached root filesystem is not pristine (podman or python3 found); remove $pristine"
fi
dest=$root/root/inkling-fleet
# A clone, as a new user has it (committed work only: commit before a run by hand).
git clone -q --no-hardlinks "$top" "$dest"
log "clone of $(git rev-parse --short HEAD) in /root/inkling-fleet ($(du -sh --exclude=.git "$dest" | cut -f1) and .git)"
echo "nameserver 10.0.2.3" > "$root/etc/resolv.conf"   # slirp4netns's DNS forwarder
# This machine's way out, which is network configuration and no package: the local CA
# certificates (an egress proxy may re-sign TLS with one; the ca-certificates package
# that setup.sh installs then trusts them) and proxy variables, if any.
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
proxy_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && proxy_env+=("$v=${!v}")
done

cat > "$root/root/fresh-run.sh" <<'EOF'
set -euo pipefail
cd /root/inkling-fleet
step() { printf '\nfresh: === %s\n' "$*"; }
step "scripts/setup.sh"
bash scripts/setup.sh
step "lab/lab.sh up --services-only"
bash lab/lab.sh up --services-only
step "the lab's services by name, from a container on the lab network"
export CONTAINERS_CONF=$PWD/lab/conf/containers.conf
. .venv/bin/activate
repo=$(python -c 'import yaml; print(yaml.safe_load(open("inventory/lab/group_vars/all/generated.yml"))["lab_generated_model_repo_id"])')
podman run --rm --network inkling-lab -v "$PWD/lab/.state/pki/ca.crt:/ca.crt:ro" \
  localhost/inkling-lab-host:trixie /bin/sh -c '
    set -e
    getent hosts lab-registry lab-hub
    code=$(curl -s -o /dev/null -w "%{http_code}" --cacert /ca.crt https://lab-registry:5000/v2/)
    echo "registry https://lab-registry:5000/v2/ answered $code (401: asks for credentials)"
    [ "$code" = 401 ]
    code=$(curl -s -o /dev/null -w "%{http_code}" http://lab-hub:8090/api/models/'"$repo"'/revision/main)
    echo "hub http://lab-hub:8090/api/models/'"$repo"'/revision/main answered $code"
    [ "$code" = 200 ]'
step "lab/lab.sh down"
bash lab/lab.sh down
echo "fresh: passed: setup and the lab's services on a pristine Debian 12"
EOF
if [ -n "${FRESH_COMMAND:-}" ]; then
  # A whole new-user trial instead: the given commands, run from the checkout inside
  # (the pristine-root check itself is not nested: FRESH_MACHINE=0).
  printf 'set -euo pipefail\ncd /root/inkling-fleet\nexport FRESH_MACHINE=0\n%s\n' "$FRESH_COMMAND" > "$root/root/fresh-run.sh"
  log "the command inside: $FRESH_COMMAND"
fi

# 3. Run it in namespaces of its own. PID 1 of the new PID namespace mounts what the
# chroot needs (a private /dev/shm: podman keeps its locks there) and waits for the
# network that slirp4netns attaches from outside.
what="scripts/setup.sh and the lab's services"
[ -n "${FRESH_COMMAND:-}" ] && what="the command"
log "running $what inside it (limit ${limit} s)"
rc=0
# shellcheck disable=SC2016 # the inner script expands its own arguments
timeout --kill-after=30 "$limit" unshare --net --mount --pid --fork --uts --propagation private \
  /bin/bash -c '
    set -e
    root=$1
    for _ in $(seq 1 100); do ip -o addr show tap0 2>/dev/null | grep -q "inet " && break; sleep 0.1; done
    ip -o addr show tap0 | grep -q "inet " || { echo "fresh: ERROR: no network (slirp4netns)" >&2; exit 1; }
    hostname fresh-debian12
    # The root a mount point of its own, as on a machine (podman remounts / private).
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    mount -t tmpfs -o mode=0755 run "$root/run"
    # The copy becomes the root of this mount namespace, and the machine tree goes: a
    # chroot would leave it reachable, and podman (systemd mode) then mounts the
    # machine'"'"'s /proc into containers.
    mkdir -p "$root/.oldroot"
    cd "$root"
    pivot_root . .oldroot
    exec /usr/sbin/chroot . /bin/sh -c '"'"'umount -l /.oldroot && rmdir /.oldroot && exec "$@"'"'"' sh \
      /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 TERM=dumb "${@:2}" /bin/bash /root/fresh-run.sh
  ' fresh "$root" "${proxy_env[@]+"${proxy_env[@]}"}" &
ns_pid=$!
# The unshare process (timeout's child) sits in the new network namespace itself: it
# forks only for PID 1 of the new PID namespace. slirp4netns attaches to it.
unshare_pid=
for _ in $(seq 1 100); do
  unshare_pid=$(pgrep -P "$ns_pid" -x unshare || true)
  if [ -n "$unshare_pid" ] &&
     [ "$(readlink "/proc/$unshare_pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ]; then
    break
  fi
  unshare_pid=
  sleep 0.1
done
[ -n "$unshare_pid" ] || die "the namespaces did not come up"
slirp4netns --configure --mtu=65520 --disable-host-loopback "$unshare_pid" tap0 >"$work/slirp.log" 2>&1 &
slirp_pid=$!
wait "$ns_pid" || rc=$?
if [ "$rc" != 0 ]; then
  [ "$rc" = 124 ] && log "timed out after ${limit} s"
  die "failed on a pristine Debian 12 (exit $rc); the output is above"
fi
log "passed"
