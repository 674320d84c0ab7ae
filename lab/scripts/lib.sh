# shellcheck shell=bash
# shellcheck disable=SC2034 # the settings are used by the scripts that source this file
# Shared settings and helpers for lab/lab.sh and lab/scripts/*.sh.
# Sourced, never run. Everything the lab creates is named here.

lab_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo_dir=$(cd "$lab_dir/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$lab_dir/conf/containers.conf}

LAB_STATE=${LAB_STATE:-$lab_dir/.state}
LAB_IMAGE=${LAB_HOST_IMAGE:-localhost/inkling-lab-host:trixie}
LAB_NETWORK=inkling-lab
LAB_SUBNET=10.89.64.0/24
LAB_REGISTRY=lab-registry
LAB_REGISTRY_PORT=5000
LAB_HUB=lab-hub
LAB_HUB_PORT=8090
# The fleet hosts; inventory/lab/hosts.yml lists the same names (a unit test checks it).
LAB_HOSTS=(lab-h200-01 lab-h200-02 lab-b200-01 lab-b200-02)
# The unprivileged account the controller logs in as over SSH (passwordless sudo, as on a
# real fleet); its key, known_hosts and ssh config (lab/scripts/ssh.sh) are under $LAB_STATE/ssh.
LAB_SSH_USER=inkling-ops
LAB_INVENTORY=$repo_dir/inventory/lab
LAB_GENERATED=$LAB_INVENTORY/group_vars/all/generated.yml
LAB_SETTINGS=$LAB_INVENTORY/group_vars/all/lab.yml
# The vLLM stand-in images built by lab/standin/ and where they go in the lab registry.
LAB_STANDIN_LOCAL=localhost/inkling-vllm-standin
LAB_STANDIN_REPO=inkling/vllm-standin
LAB_STANDIN_TAGS=(lab bad oldarch garbage mmbroken drift slow overload)

# Labels mark everything lab.sh creates, so `down` removes exactly that.
LAB_LABEL=io.inkling.lab=1

# Prefer the project's virtualenv (ansible, PyYAML) when it exists.
if [ -d "$repo_dir/.venv/bin" ]; then
  PATH=$repo_dir/.venv/bin:$PATH
fi
LAB_PYTHON=${LAB_PYTHON:-$(command -v python3)}

log() { printf 'lab: %s\n' "$*" >&2; }
warn() { printf 'lab: WARNING: %s\n' "$*" >&2; }
die() { printf 'lab: ERROR: %s\n' "$*" >&2; exit 1; }
skip() { printf 'lab: SKIP: %s\n' "$*" >&2; }

# now_s: seconds since the epoch with decimals, for timings.
now_s() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

container_running() {
  [ "$(podman container inspect --format '{{.State.Running}}' "$1" 2>/dev/null)" = true ]
}

container_exists() { podman container exists "$1" 2>/dev/null; }

# lab_setting KEY: a plain value from inventory/lab/group_vars/all/lab.yml, the one
# place the lab's fixed settings (registry credentials, ...) are written down.
lab_setting() {
  "$LAB_PYTHON" - "$LAB_SETTINGS" "$1" <<'EOF'
import sys
import yaml
with open(sys.argv[1], encoding="utf-8") as f:
    data = yaml.safe_load(f)
value = data.get(sys.argv[2])
if value is None:
    sys.exit("lab: ERROR: %s has no %s" % (sys.argv[1], sys.argv[2]))
print(value)
EOF
}

require_host_image() {
  # The build script rebuilds an image older than its version label (or a missing one).
  "$lab_dir/images/build-host-image.sh" >&2
}

# file_sha FILE...: one sha256 over the given files' contents (missing files count as empty).
file_sha() {
  local f
  for f in "$@"; do
    printf '%s\n' "$f"
    cat "$f" 2>/dev/null || true
  done | sha256sum | cut -d' ' -f1
}
