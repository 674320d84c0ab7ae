#!/usr/bin/env bash
# Every benchmark under bench/ in its quick mode (--quick: small sizes, a few seconds of tc
# shaping, one run), so that none of them rots unnoticed: each must run to its end and pass its
# own correctness checks (complete snapshots, no content re-read, changed=0 on a no-op re-run,
# both upgrade playbooks to their end). The figures they print are not judged here; the numbers
# in bench/README.md come from full runs.
#
# Needs the set-up (scripts/setup.sh) and the lab services (lab/lab.sh up --services-only);
# starts the lab's four hosts for the benchmarks that need a serving fleet and removes them at
# the end (the services stay). scripts/test.sh runs reverify, canary and journal as the step
# `bench-quick`, and fanout, scale, connections and unavailability as `bench-quick-lab` at the end
# of molecule's second lane (bench/README.md). scale needs neither the lab's services nor its hosts
# (its own hub, simulated hosts).
#
#   bash scripts/bench-quick.sh [NAME...]   NAME: reverify canary fanout journal scale connections unavailability
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
export PATH="$top/.venv/bin:$PATH"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$top/lab/conf/containers.conf}
# shellcheck source=lab/scripts/lib.sh
. lab/scripts/lib.sh

names=${*:-reverify canary fanout journal scale connections unavailability}
failed=()
bench() { # bench NAME COMMAND...
  local name=$1 t0=$SECONDS rc=0
  shift
  [[ " $names " == *" $name "* ]] || return 0
  echo "--- bench-quick: $name: $*"
  "$@" || rc=$?
  echo "--- bench-quick: $name: rc $rc, $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || failed+=("$name")
}

fleet_was_up=false
podman container exists "${LAB_HOSTS[0]}" && fleet_was_up=true

bench reverify python bench/hf_cache_reverify.py --quick
bench canary python bench/canary_analysis.py --quick
bench fanout python bench/hf_cache_fanout.py --quick --no-lab-up
bench journal python bench/journal_calls.py --quick
bench scale python bench/rollout_scale.py --quick
if [[ " $names " == *" connections "* || " $names " == *" unavailability "* ]]; then
  # One lab host (the four boot; one is deployed): the first deploy over SSH, then a no-op
  # re-run over SSH and one over the podman connection.
  bench connections python bench/connections.py --runs 1 --limit "${LAB_HOSTS[0]}"
  # Needs that serving host: upgraded by the rollout, put back, upgraded by the naive
  # baseline (bench/naive_rollout.yml).
  bench unavailability python bench/rollout_unavailability.py --quick --hosts "${LAB_HOSTS[0]}"
  if [ "$fleet_was_up" = false ]; then
    podman rm -f -t 5 --ignore "${LAB_HOSTS[@]}" >/dev/null || echo "bench-quick: could not remove the lab hosts"
    rm -f "$LAB_STATE/prepared"
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "bench-quick: FAILED: ${failed[*]}"
  exit 1
fi
echo "bench-quick: every benchmark ran"
