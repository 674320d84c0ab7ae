#!/usr/bin/env bash
# Run `ansible-test sanity` on the collection. ansible-test needs the collection at
# .../ansible_collections/inkling/fleet inside a git repository, so the files git
# would ship are copied into build/ and committed there; its get-pip bootstrap is
# served from a local cache (scripts/ansible-test-get-pip.py) because the host it
# downloads from is not reachable from our machines.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
py_version=${ANSIBLE_TEST_PYTHON:-3.11}

# ansible-test only warns and skips its shellcheck test when the program is missing.
command -v shellcheck >/dev/null ||
  { echo "sanity: shellcheck is not installed (Debian package shellcheck; scripts/setup.sh installs it)" >&2; exit 1; }

cache=$HOME/.ansible/test/cache
pip_version=$(.venv/bin/python - <<'PY'
import re, ansible_test, os
src = open(os.path.join(os.path.dirname(ansible_test.__file__), '_internal', 'python_requirements.py')).read()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
mkdir -p "$cache"
if ! ls "$cache"/pip-"$pip_version"-*.whl >/dev/null 2>&1; then
  .venv/bin/pip download -q --no-deps --only-binary=:all: -d "$cache" "pip==$pip_version"
fi
cp scripts/ansible-test-get-pip.py "$cache/get_pip_${pip_version//./_}.py"

dest=build/ansible_collections/inkling/fleet
rm -rf build/ansible_collections
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] || continue
  mkdir -p "$dest/$(dirname "$f")"
  cp -a "$f" "$dest/$f"
done
(
  cd "$dest"
  git init -q
  git add -A
  git -c user.name=sanity -c user.email=sanity@invalid commit -qm sanity
  "$top/.venv/bin/ansible-test" sanity --venv --python "$py_version" --color no "$@"
)
