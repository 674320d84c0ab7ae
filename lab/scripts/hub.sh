#!/usr/bin/env bash
# Start the Hugging Face hub test double: generate the synthetic model repository
# (lab/hub/ generator) under lab/.state/hub when needed, and run lab/hub/fake_hub.py
# in the container lab-hub on the lab network (http://lab-hub:8090; from this
# machine http://127.0.0.1:8090), serving that directory read-only.
# Writes the model's repo id and revision to lab/.state/generated/hub.yml.
# Idempotent: regenerates only when the generator changed; keeps a running hub
# whose settings did not change.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
. "$(dirname "$0")/lib.sh"

hub_src=$lab_dir/hub
server=$hub_src/fake_hub.py
generator=$hub_src/make-model.py
data=$LAB_STATE/hub
gen=$LAB_STATE/generated
mkdir -p "$gen"
rm -f "$gen/hub.yml"

if [ ! -f "$server" ]; then
  skip "hub test double not started: $server is missing (lab/hub/ not delivered yet)"
  exit 0
fi
if [ ! -f "$generator" ]; then
  skip "hub test double not started: the model generator $generator is missing"
  exit 0
fi

# The generator writes DIR/models/ORG/NAME/{refs.json,commits/SHA/...}; it runs again
# only when it changed (or its output is gone).
want_gen=$(file_sha "$generator")
if [ "$(cat "$data/.generator" 2>/dev/null)" != "$want_gen" ]; then
  log "generating the synthetic model repository in $data"
  rm -rf "$data.new"
  "$LAB_PYTHON" "$generator" --root "$data.new" >&2
  rm -rf "$data"
  mv "$data.new" "$data"
  echo "$want_gen" > "$data/.generator"
fi

# The repo id, the revision `main` points at and the snapshot's size, for the inventory.
"$LAB_PYTHON" - "$data" > "$gen/hub.yml.new" <<'PY'
import json
import os
import sys
root = sys.argv[1]
repos = []
for org in sorted(os.listdir(os.path.join(root, "models"))):
    for name in sorted(os.listdir(os.path.join(root, "models", org))):
        repos.append("%s/%s" % (org, name))
if not repos:
    sys.exit("lab: ERROR: no repository under %s/models" % root)
repo = repos[0]
with open(os.path.join(root, "models", repo, "refs.json"), encoding="utf-8") as f:
    sha = json.load(f)["branches"]["main"]
size = 0
for top, _dirs, files in os.walk(os.path.join(root, "models", repo, "commits", sha)):
    size += sum(os.path.getsize(os.path.join(top, n)) for n in files)
print("lab_generated_model_repo_id: %s" % repo)
print("lab_generated_model_revision: \"%s\"" % sha)
print("lab_generated_model_size_bytes: %d" % size)
print("lab_generated_model_repos: [%s]" % ", ".join(repos))
PY
mv "$gen/hub.yml.new" "$gen/hub.yml"

# hf_cache_token in inventory/lab/group_vars/all/lab.yml: when set, the hub requires it
# (Authorization: Bearer), as a gated repository on the real hub does.
token=$(lab_setting hf_cache_token)
token_args=()
[ -z "$token" ] || token_args=(--token "$token")

want=$(file_sha "$0" "$server" "$data/.generator"; podman image inspect --format "{{.Id}}" "$LAB_IMAGE"; echo "$token")
have=$(podman container inspect --format '{{index .Config.Labels "io.inkling.lab.config"}}' "$LAB_HUB" 2>/dev/null || true)
if container_running "$LAB_HUB" && [ "$have" = "$want" ]; then
  exit 0
fi
if container_exists "$LAB_HUB"; then
  log "replacing $LAB_HUB (settings changed or not running)"
  podman rm -f -t 5 "$LAB_HUB" >/dev/null
fi
log "starting $LAB_HUB (http://$LAB_HUB:$LAB_HUB_PORT, http://127.0.0.1:$LAB_HUB_PORT)"
podman run -d --name "$LAB_HUB" --hostname "$LAB_HUB" \
  --label "$LAB_LABEL" --label "io.inkling.lab.config=$want" \
  --network "$LAB_NETWORK" --cap-add NET_ADMIN --stop-signal SIGINT \
  --publish "127.0.0.1:$LAB_HUB_PORT:8090" \
  --volume "$hub_src:/opt/lab-hub:ro" \
  --volume "$data:/srv/hub:ro" \
  "$LAB_IMAGE" python3 /opt/lab-hub/fake_hub.py --root /srv/hub --host 0.0.0.0 --port 8090 \
  "${token_args[@]+"${token_args[@]}"}" >/dev/null

for _ in $(seq 1 100); do
  if curl -sf -o /dev/null "http://127.0.0.1:$LAB_HUB_PORT/_fake/health"; then
    exit 0
  fi
  if ! container_running "$LAB_HUB"; then
    podman logs --tail 20 "$LAB_HUB" >&2 || true
    die "$LAB_HUB exited; its log is above"
  fi
  sleep 0.1
done
podman logs --tail 20 "$LAB_HUB" >&2 || true
die "$LAB_HUB did not answer on http://127.0.0.1:$LAB_HUB_PORT/_fake/health within 10 s"
