#!/usr/bin/env bash
# All of inkling.fleet's tests, from a fresh Debian 12 machine, as root: set-up (apt,
# pip), lint (yamllint, ansible-lint production profile), ansible-test sanity, pytest
# unit tests, the built collection installed and used from outside the repository (and
# its execution environment definition), the README's set-up on a pristine Debian 12
# root filesystem, the lab's own tests (tests/lab, against this checkout's lab services),
# the quick modes of every benchmark (bench-quick, bench-quick-lab) and the molecule
# scenarios on the lab (podman, systemd containers).
# Each step runs even when an earlier one failed; the exit status is non-zero if any
# failed. The end shows each step's time and a line counting steps passed and failed.
#
# Environment: MOLECULE_SCENARIOS (default: all six), FRESH_MACHINE=0 skips the
# pristine-root check (it needs root, debootstrap and about 5 minutes).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
t_start=$SECONDS

bash scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
export PATH="$top/.venv/bin:$PATH"
export CONTAINERS_CONF="$top/lab/conf/containers.conf"
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0

scenarios=${MOLECULE_SCENARIOS:-"preflight hf_cache image service replica default"}
passed=0 failed=0 failed_steps=() timings=()
record() { # record NAME RC SECONDS
  if [ "$2" = 0 ]; then
    passed=$((passed + 1)); echo "=== step passed: $1 ($3 s)"; timings+=("$(printf '%-22s %6s s  passed' "$1" "$3")")
  else
    failed=$((failed + 1)); failed_steps+=("$1"); echo "=== step FAILED: $1 ($3 s)"
    timings+=("$(printf '%-22s %6s s  FAILED' "$1" "$3")")
  fi
}
step() {
  local name=$1 t0=$SECONDS rc=0; shift
  echo
  echo "=== step: $name"
  "$@" || rc=$?
  record "$name" "$rc" $((SECONDS - t0))
}

# The pristine-root check waits mostly on apt and PyPI: it runs beside the lint,
# sanity and unit steps and is collected after them.
fresh_log=$(mktemp /tmp/inkling-fresh-machine.XXXXXX.log)
fresh_pid='' fresh_t0=$SECONDS
if [ "${FRESH_MACHINE:-1}" != 0 ]; then
  bash scripts/fresh-machine.sh > "$fresh_log" 2>&1 &
  fresh_pid=$!
fi

step yamllint yamllint -s .
step ansible-lint ansible-lint --offline
step sanity bash scripts/sanity.sh
# The unit tests (about 5 minutes of one core) run beside the steps after them, molecule's lanes
# included, which mostly wait on containers and servers starting; collected after the lanes.
unit_log=$(mktemp /tmp/inkling-unit.XXXXXX.log)
unit_t0=$SECONDS
pytest -q -rs tests/unit > "$unit_log" 2>&1 &
unit_pid=$!
step collection bash scripts/collection-check.sh
if [ -n "$fresh_pid" ]; then
  echo
  echo "=== step: fresh-machine (started with the first step)"
  rc=0; wait "$fresh_pid" || rc=$?
  cat "$fresh_log"
  record fresh-machine "$rc" $((SECONDS - fresh_t0))
fi
rm -f "$fresh_log"

lab_was_up=false
[ "$(podman container inspect --format '{{.State.Running}}' lab-registry 2>/dev/null)" = true ] && lab_was_up=true
step lab-services bash lab/lab.sh up --services-only
step lab-tests pytest -q -rs tests/lab
# The short benchmarks that need no lab fleet, in their quick modes (about 15 seconds): they must
# run to their end. The longer ones run at the end of molecule's second lane, which ends several
# minutes before the first: fanout (its own hub and hosts, about 1.5 minutes), scale (simulated
# hosts, about 2 minutes of CPU), connections and unavailability (the lab's own hosts, about 6.5
# minutes).
step bench-quick bash scripts/bench-quick.sh reverify canary journal
lab_bench() { bash scripts/bench-quick.sh fanout scale connections unavailability; }
# Molecule in two lanes: `default` (the longest, the lab end to end) and `replica`, both over
# SSH, beside the role scenarios one after the other (each lane about 30 minutes of a 2-core
# machine). Most of a scenario's time is waiting on containers and servers starting, so two
# lanes share the 2 cores of a CI machine well. MOLECULE_LANES=1 runs them one after the other.
main_lane=" ${MOLECULE_MAIN_LANE:-default replica} "
lane_scenarios=() main_scenarios=()
for s in $scenarios; do
  if [ "${MOLECULE_LANES:-2}" -ge 2 ] && [[ "$main_lane" != *" $s "* ]]; then lane_scenarios+=("$s"); else main_scenarios+=("$s"); fi
done
lane_log=$(mktemp /tmp/inkling-molecule-lane.XXXXXX.log) lane_results=$(mktemp /tmp/inkling-molecule-lane.XXXXXX.txt)
lane_pid=''
if [ ${#lane_scenarios[@]} -gt 0 ]; then
  (
    for s in "${lane_scenarios[@]}"; do
      t0=$SECONDS rc=0
      echo; echo "=== step: molecule:$s (second lane)"
      molecule test -s "$s" || rc=$?
      echo "molecule:$s $rc $((SECONDS - t0))" >> "$lane_results"
    done
    t0=$SECONDS rc=0
    echo; echo "=== step: bench-quick-lab (second lane)"
    lab_bench || rc=$?
    echo "bench-quick-lab $rc $((SECONDS - t0))" >> "$lane_results"
  ) > "$lane_log" 2>&1 &
  lane_pid=$!
fi
for s in "${main_scenarios[@]}"; do
  step "molecule:$s" molecule test -s "$s"
done
# One lane: the lab benchmarks after the scenarios.
[ -n "$lane_pid" ] || step bench-quick-lab lab_bench
if [ -n "$lane_pid" ]; then
  wait "$lane_pid"
  cat "$lane_log"
  while read -r name rc secs; do record "$name" "$rc" "$secs"; done < "$lane_results"
  for name in "${lane_scenarios[@]/#/molecule:}" bench-quick-lab; do
    grep -q "^$name " "$lane_results" || record "$name" 1 0
  done
fi
rm -f "$lane_log" "$lane_results"

echo
echo "=== step: unit (started after sanity, beside the steps since)"
rc=0; wait "$unit_pid" || rc=$?
cat "$unit_log"
record unit "$rc" $((SECONDS - unit_t0))
rm -f "$unit_log"

# Leave nothing running, unless the lab was already up before the tests (make lab-deploy).
# This is clean-up, not a test: a failure is reported but does not fail the run.
if [ "$lab_was_up" = false ]; then
  bash lab/lab.sh down || echo "warning: lab/lab.sh down failed; run it again to remove what is left"
fi

echo
echo "=== time per step (fresh-machine ran beside the steps before unit; unit beside the steps after it)"
printf '%s\n' "${timings[@]}"
echo "total: $((SECONDS - t_start)) s"
if [ $failed -gt 0 ]; then echo "failed steps: ${failed_steps[*]}"; fi
echo "steps: $passed passed, $failed failed"
[ $failed -eq 0 ]
