#!/usr/bin/env bash
# All of inkling.fleet's tests, from a fresh machine: set-up (apt, pip), lint
# (yamllint, ansible-lint production profile), ansible-test sanity, pytest unit
# tests, and the molecule scenarios on the lab (podman, systemd containers).
# Each step runs even when an earlier one failed; the exit status is non-zero if
# any failed, and the last line counts steps passed and failed.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1

bash scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
export PATH="$top/.venv/bin:$PATH"
export CONTAINERS_CONF="$top/lab/conf/containers.conf"
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0

scenarios=${MOLECULE_SCENARIOS:-"preflight hf_cache image service default"}
passed=0 failed=0 failed_steps=()
step() {
  local name=$1; shift
  local t0=$SECONDS
  echo
  echo "=== step: $name"
  if "$@"; then
    passed=$((passed + 1)); echo "=== step passed: $name ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failed_steps+=("$name"); echo "=== step FAILED: $name ($((SECONDS - t0)) s)"
  fi
}

step yamllint yamllint -s .
step ansible-lint ansible-lint --offline
step sanity bash scripts/sanity.sh
step unit pytest -q tests/unit
lab_was_up=false
[ "$(podman container inspect --format '{{.State.Running}}' lab-registry 2>/dev/null)" = true ] && lab_was_up=true
step lab-services bash lab/lab.sh up --services-only
for s in $scenarios; do
  step "molecule:$s" molecule test -s "$s"
done

# Leave nothing running, unless the lab was already up before the tests (make lab-deploy).
# This is clean-up, not a test: a failure is reported but does not fail the run.
if [ "$lab_was_up" = false ]; then
  bash lab/lab.sh down || echo "warning: lab/lab.sh down failed; run it again to remove what is left"
fi

echo
if [ $failed -gt 0 ]; then echo "failed steps: ${failed_steps[*]}"; fi
echo "steps: $passed passed, $failed failed"
[ $failed -eq 0 ]
