#!/usr/bin/env bash
# The collection as a user gets it: build the tarball with ansible-galaxy, install it
# and its declared dependencies into an empty collections path, and use it from a
# directory outside the repository, with no other collection in sight:
#   - the tarball holds what a user needs and nothing a run leaves behind;
#   - `ansible-playbook inkling.fleet.deploy_inkling --syntax-check` resolves every
#     module and role (a missing dependency fails here: "couldn't resolve module/action");
#   - `ansible-doc` renders every module and every role's entry points.
# Galaxy is not reachable from our machines, so each dependency is installed from a
# tarball made of the copy the pinned `ansible` package carries (same MANIFEST.json and
# FILES.json as the Galaxy artifact; ansible-galaxy checks every file against them).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export PATH=$top/.venv/bin:$PATH

work=$(mktemp -d /tmp/inkling-collection-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/artifacts" "$work/collections" "$work/elsewhere"

fail() { printf 'collection-check: FAILED: %s\n' "$*" >&2; exit 1; }

echo "collection-check: building the collection"
ansible-galaxy collection build --output-path "$work/artifacts" . >/dev/null
tarball=$(ls "$work"/artifacts/inkling-fleet-*.tar.gz)

# What must not be in the tarball: the lab, tests, CI and build machinery, anything a
# run leaves behind. What must be: the parts a user runs.
listing=$(tar tzf "$tarball")
for bad in reports/ inventory/lab/ lab/ molecule/ tests/ bench/ scripts/ .venv/ collections/ build/ .ci/ Makefile; do
  if grep -q "^${bad}" <<<"$listing"; then
    fail "the tarball carries ${bad}: add it to build_ignore in galaxy.yml"
  fi
done
for want in MANIFEST.json FILES.json README.md LICENSE meta/runtime.yml playbooks/deploy_inkling.yml \
    roles/preflight/meta/argument_specs.yml roles/rollout/tasks/main.yml plugins/modules/inkling_variant.py data/variants.yml \
    data/deployment.yml data/golden_set.yml \
    inventory/example/hosts.yml docs/operator-guide.md meta/execution-environment.yml bindep.txt; do
  grep -qx "$want" <<<"$listing" || fail "the tarball lacks $want"
done
echo "collection-check: tarball $(basename "$tarball"): $(wc -l <<<"$listing") entries, no lab/test/run files"

# Dependencies from local tarballs (the versions the pinned ansible package carries).
site=$(python -c 'import ansible_collections, os; print(os.path.dirname(next(iter(ansible_collections.__path__))))')
deps=$(python - "$top/galaxy.yml" <<'PY'
import sys, yaml
print(" ".join((yaml.safe_load(open(sys.argv[1])) or {}).get("dependencies") or {}))
PY
)
dep_tarballs=()
for dep in $deps; do
  ns=${dep%%.*} name=${dep#*.}
  src=$site/ansible_collections/$ns/$name
  [ -f "$src/MANIFEST.json" ] || fail "dependency $dep is not in the pinned ansible package ($src)"
  version=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["collection_info"]["version"])' "$src/MANIFEST.json")
  out=$work/artifacts/$ns-$name-$version.tar.gz
  python - "$src" "$out" <<'PY'
# The ansible package leaves out parts of a collection (tests/) that FILES.json still
# lists: the tarball lists what it carries, each file with the checksum the collection
# was published with, so the installer still checks every file.
import io, json, os, sys, tarfile
src, out = sys.argv[1:]
with open(os.path.join(src, "FILES.json"), encoding="utf-8") as f:
    files = json.load(f)
files["files"] = [e for e in files["files"]
                  if e["name"] == "." or os.path.lexists(os.path.join(src, e["name"]))]
with tarfile.open(out, "w:gz") as tar:
    data = json.dumps(files, indent=4).encode()
    info = tarfile.TarInfo("FILES.json"); info.size = len(data); info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
    tar.add(os.path.join(src, "MANIFEST.json"), "MANIFEST.json")
    for e in files["files"]:
        if e["name"] != ".":
            tar.add(os.path.join(src, e["name"]), e["name"], recursive=False)
PY
  dep_tarballs+=("$out")
  echo "collection-check: dependency $dep $version (local tarball)"
done

# From elsewhere: no ansible.cfg, no repository, no collection from sys.path (the
# ansible package's own copies stay out of sight, also to the installer, which would
# otherwise skip a dependency as "already installed").
cd "$work/elsewhere"
export ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
unset ANSIBLE_CONFIG
# Install into the empty path; --offline: nothing may come from Galaxy.
ansible-galaxy collection install --offline -p "$work/collections" "$tarball" "${dep_tarballs[@]}" >/dev/null ||
  fail "ansible-galaxy collection install of the tarball and its dependencies"
installed=$(ansible-galaxy collection list --format json 2>/dev/null |
  python -c 'import json,sys; print(" ".join(sorted(n + ":" + v["version"] for p in json.load(sys.stdin).values() for n, v in p.items())))')
echo "collection-check: installed, and all that Ansible sees: $installed"
printf 'gpu-01 ansible_connection=local\n' > hosts
inst=$work/collections/ansible_collections/inkling/fleet
# Every playbook the collection ships, called by name as a user calls it (a name with a hyphen
# "could not be found": collection playbook names are Python identifiers).
for pb in "$inst"/playbooks/*.yml; do
  pb=$(basename "$pb" .yml)
  ansible-playbook -i hosts "inkling.fleet.$pb" --syntax-check >/dev/null ||
    fail "ansible-playbook inkling.fleet.$pb --syntax-check from the installed collection"
  echo "collection-check: syntax-check inkling.fleet.$pb: ok"
done
n=0
for m in "$inst"/plugins/modules/*.py; do
  m=$(basename "$m" .py)
  ansible-doc -t module "inkling.fleet.$m" >/dev/null || fail "ansible-doc -t module inkling.fleet.$m"
  n=$((n + 1))
done
echo "collection-check: ansible-doc for $n modules: ok"
n=0
for r in "$inst"/roles/*/; do
  r=$(basename "$r")
  ansible-doc -t role "inkling.fleet.$r" >/dev/null || fail "ansible-doc -t role inkling.fleet.$r"
  n=$((n + 1))
done
echo "collection-check: ansible-doc for $n roles: ok"

# The deployment's defaults, the variant table and the golden set are collection data: the
# inkling_variant action reads data/deployment.yml and data/variants.yml, the analysis_prompts
# filter data/golden_set.yml, from the installed collection. A host with no GPU is refused by
# the table's rules (for the model the data names); a file the plugins cannot find would fail
# with the file's name instead.
out=$(ansible -i hosts gpu-01 -e ansible_python_interpreter="$(command -v python)" -m inkling.fleet.inkling_variant \
  -a '{"gpu": {"gpu_count": 0, "gpus": [], "compute_caps": []}}' 2>&1) || true
grep -q '"refusals"' <<<"$out" || fail "inkling.fleet.inkling_variant from the installed collection: $out"
grep -q 'thinkingmachines/Inkling-NVFP4' <<<"$out" || fail "inkling.fleet.inkling_variant from the installed collection: $out"
out=$(ansible -i hosts gpu-01 -m ansible.builtin.debug -a 'msg={{ none | inkling.fleet.analysis_prompts | length }}' 2>&1) ||
  fail "inkling.fleet.analysis_prompts from the installed collection: $out"
grep -Eq '"msg": "?10"?$' <<<"$out" || fail "inkling.fleet.analysis_prompts from the installed collection: $out"
echo "collection-check: inkling_variant and analysis_prompts read the installed collection's data: ok"

# What the execution environment's build runs on the collection: its introspect step (the
# generated Containerfile's `introspect.py introspect`, here the same code through
# `ansible-builder introspect`) reads the installed collection's meta/execution-environment.yml
# and bindep.txt, and must find the ssh client.
deps_out=$(ansible-builder introspect "$work/collections" 2>&1) ||
  fail "ansible-builder introspect of the installed collection: $deps_out"
python - "$deps_out" <<'PY' || fail "ansible-builder introspect of the installed collection: $deps_out"
import sys, yaml
data = yaml.safe_load(sys.argv[1].split("---", 1)[1])
system = [line for line in data.get("system") or [] if "inkling.fleet" in line]
sys.exit(0 if any(line.startswith("openssh-clients [platform:rpm]") for line in system) else 1)
PY
echo "collection-check: ansible-builder introspect of the installed collection: ok (system: openssh-clients)"

# The execution environment (execution-environment.yml): ansible-builder writes its
# build context (nothing is pulled); the context must carry this very collection, the
# same dependencies as galaxy.yml and the tested ansible-core.
cd "$top"
rm -f build/inkling-fleet-*.tar.gz
mkdir -p build
cp "$tarball" build/
ansible-builder create -f execution-environment.yml --context "$work/ee" >/dev/null ||
  fail "ansible-builder create -f execution-environment.yml"
python - "$work/ee" "$tarball" <<'PY' || fail "the execution environment's build context (above)"
import os, sys, yaml
ctx, tarball = sys.argv[1:]
errors = []
galaxy = yaml.safe_load(open("galaxy.yml"))
runtime = yaml.safe_load(open("meta/runtime.yml"))
reqs = yaml.safe_load(open(os.path.join(ctx, "_build", "requirements.yml")))["collections"]
files = [r["name"] for r in reqs if r.get("type") == "file"]
if files != ["collections/" + os.path.basename(tarball)]:
    errors.append("requirements name %s, expected collections/%s (galaxy.yml version %s)"
                  % (files, os.path.basename(tarball), galaxy["version"]))
elif not os.path.isfile(os.path.join(ctx, "_build", files[0])):
    errors.append("the build context lacks %s" % files[0])
deps = {r["name"]: r.get("version") for r in reqs if r.get("type") != "file"}
if deps != dict(galaxy.get("dependencies") or {}):
    errors.append("collections %s differ from galaxy.yml's dependencies %s" % (deps, galaxy.get("dependencies")))
containerfile = open(os.path.join(ctx, "Containerfile")).read()
core = [l for l in containerfile.splitlines() if "ansible-core==" in l]
tested = runtime["requires_ansible"].split(",")[0].lstrip(">=")
if not core or "ansible-core==" + tested not in core[0]:
    errors.append("the Containerfile installs %s, expected ansible-core==%s (meta/runtime.yml)" % (core, tested))
for e in errors:
    print("collection-check: execution environment: " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
echo "collection-check: execution environment: ansible-builder create: ok (collection, dependencies, ansible-core)"
echo "collection-check: passed"
