#!/usr/bin/env bash
# The main job on the built-in lab fleet, from a fresh Debian 12 machine, as root:
# set-up (scripts/setup.sh), the lab (lab/lab.sh up: network, CA, registry, hub, four
# simulated GPU hosts), then deploy-inkling.yml against it. Extra arguments go to
# ansible-playbook (e.g. --check --diff, --limit lab-h200-01).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/setup.sh
export PATH=$top/.venv/bin:$PATH CONTAINERS_CONF=$top/lab/conf/containers.conf
bash lab/lab.sh up
rc=0
ansible-playbook -i inventory/lab deploy-inkling.yml "$@" || rc=$?
echo "lab-deploy: journal and reports in ${XDG_STATE_HOME:-$HOME/.local/state}/inkling-fleet/reports (exit $rc)"
exit "$rc"
