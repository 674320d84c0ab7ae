#!/usr/bin/env bash
# Build the vLLM stand-in images for the lab without pulling anything:
#   localhost/inkling-vllm-standin:lab      (healthy)
#   localhost/inkling-vllm-standin:bad      (same files, ENV STANDIN_FAULT=never_healthy)
#   localhost/inkling-vllm-standin:oldarch  (same files, its PyTorch stand-in carries no kernels for
#                                            the lab hosts' compute capabilities 9.0 and 10.0)
#   localhost/inkling-vllm-standin:garbage, :mmbroken, :drift, :slow, :overload
#                                           (same files, ENV STANDIN_FAULT=garbage, mm_broken, drift,
#                                            slow, overload: builds the canary analysis must stop)
# The root filesystem is the python3 interpreter, the stdlib modules the stand-in
# imports, and their shared libraries, copied out of the lab host image
# (Debian trixie), and the stand-in's vllm and torch packages (site/README.md).
# Entrypoint ["/usr/local/bin/vllm", "serve"], as the real image.
# Idempotent: does nothing when both images exist and the stand-in is unchanged,
# unless FORCE=1. With --check it builds nothing: exit 0 when the images exist and were built
# from this source, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/../conf/containers.conf}
host_image=${LAB_HOST_IMAGE:-localhost/inkling-lab-host:trixie}
repo=${STANDIN_IMAGE_REPO:-localhost/inkling-vllm-standin}
tags=(lab bad oldarch garbage mmbroken drift slow overload)
src_sum=$( (cat "$here/vllm" "$here/answers.json" "$0"; find "$here/site" -type f -name '*.py' | LC_ALL=C sort | xargs cat) |
  sha256sum | cut -c1-16)

built=1
for t in "${tags[@]}"; do
  podman image exists "$repo:$t" &&
    [ "$(podman image inspect --format '{{ index .Config.Labels "org.inkling.standin.source" }}' "$repo:$t")" = "$src_sum" ] ||
    built=0
done
if [ "${1:-}" = --check ]; then
  if [ "$built" = 1 ]; then
    echo "standin: $repo:${tags[*]} built from this source ($src_sum)"
    exit 0
  fi
  echo "standin: $repo:${tags[*]} missing or not built from this source ($src_sum)"
  exit 1
fi
if [ "${FORCE:-0}" != 1 ] && [ "$built" = 1 ]; then
  echo "standin: $repo:${tags[*]} already built from this source"
  exit 0
fi
podman image exists "$host_image" || { echo "standin: $host_image missing; run lab/images/build-host-image.sh" >&2; exit 1; }

work=$(mktemp -d /var/tmp/inkling-standin.XXXXXX)
ctr=""
cleanup() { [ -n "$ctr" ] && podman rm -f "$ctr" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
ctr=$(podman create "$host_image" /bin/true)
mkdir -p "$work/src" "$work/root"
podman export "$ctr" | tar -C "$work/src" -x \
  --wildcards 'usr/bin/python3*' 'usr/lib/python3*' 'usr/lib/x86_64-linux-gnu/*'
src=$work/src root=$work/root
pybin=$(readlink -f "$src/usr/bin/python3"); pyname=$(basename "$pybin")
pyver=${pyname#python}
stdlib=usr/lib/python$pyver

mkdir -p "$root/usr/bin" "$root/usr/local/bin" "$root/$stdlib" "$root/tmp" "$root/root" "$root/etc" \
         "$root/usr/lib/x86_64-linux-gnu" "$root/lib64" "$root/proc" "$root/sys" "$root/dev" "$root/run"
chmod 1777 "$root/tmp"
cp -a "$pybin" "$root/usr/bin/"
ln -s "$pyname" "$root/usr/bin/python3"
# Stdlib: everything pure-Python except tests, GUI, docs tooling and bytecode of removed parts.
(cd "$src/$stdlib" && tar -c --exclude='test' --exclude='tests' --exclude='idlelib' --exclude='tkinter' \
   --exclude='turtledemo' --exclude='ensurepip' --exclude='lib2to3' --exclude='pydoc_data' \
   --exclude='config-*' --exclude='site-packages' --exclude='dist-packages' --exclude='__pycache__' \
   --exclude='sqlite3' --exclude='curses' --exclude='dbm' --exclude='unittest' --exclude='venv' .) |
  tar -C "$root/$stdlib" -x
# Native modules the stand-in may load, and every shared library they need.
keep_dyn='_asyncio|_bz2|_contextvars|_ctypes|_datetime|_decimal|_hashlib|_heapq|_json|_lzma|_md5|_opcode|_posixsubprocess|_queue|_random|_sha1|_sha2|_sha3|_blake2|_socket|_ssl|_struct|_zoneinfo|array|binascii|fcntl|math|mmap|resource|select|termios|unicodedata|zlib|_bisect|_statistics|_uuid|_multiprocessing|_pickle|_csv|_typing'
mkdir -p "$root/$stdlib/lib-dynload"
for so in "$src/$stdlib"/lib-dynload/*.so; do
  base=$(basename "$so"); mod=${base%%.*}
  if [[ "$mod" =~ ^($keep_dyn)$ ]]; then cp -a "$so" "$root/$stdlib/lib-dynload/"; fi
done
# Resolve shared-library dependencies inside the extracted tree (ldd on the host's loader).
needed() { objdump -p "$1" 2>/dev/null | awk '/NEEDED/ {print $2}'; }
if ! command -v objdump >/dev/null; then
  needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; }
fi
queue=("$root/usr/bin/$pyname" "$root/$stdlib"/lib-dynload/*.so)
declare -A seen=()
while [ ${#queue[@]} -gt 0 ]; do
  f=${queue[0]}; queue=("${queue[@]:1}")
  for lib in $(needed "$f"); do
    [ -n "${seen[$lib]:-}" ] && continue
    seen[$lib]=1
    path=$src/usr/lib/x86_64-linux-gnu/$lib
    [ -e "$path" ] || { echo "standin: cannot find $lib needed by $f" >&2; exit 1; }
    cp -aL "$path" "$root/usr/lib/x86_64-linux-gnu/$lib"
    queue+=("$root/usr/lib/x86_64-linux-gnu/$lib")
  done
done
[ -e "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] ||
  cp -aL "$src/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$root/usr/lib/x86_64-linux-gnu/"
ln -s /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
ln -s usr/lib "$root/lib"
# Minimal /etc: users for getpwuid, hosts for localhost.
printf 'root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$root/etc/hosts"
# The stand-in's packages (vllm with the server as vllm._standin, torch), where Debian's python3
# finds packages installed for the machine, and /usr/local/bin/vllm as a console script like pip writes.
site=usr/local/lib/python$pyver/dist-packages
mkdir -p "$root/$site"
cp -a "$here/site/vllm" "$here/site/torch" "$root/$site/"
cp "$here/vllm" "$root/$site/vllm/_standin.py"
cp "$here/answers.json" "$root/$site/vllm/answers.json"
# No /usr/bin/env in the image: point the shebang at the interpreter directly.
printf '#!/usr/bin/python3\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
  > "$root/usr/local/bin/vllm"
chmod 0755 "$root/usr/local/bin/vllm"
# Precompile bytecode so start-up does not try to write into the image.
chroot "$root" /usr/bin/python3 -m compileall -q -j0 "/$stdlib" "/$site" /usr/local/bin >/dev/null 2>&1 || true
# Smoke test inside the tree before importing: the server's modules, and what image_trial asks.
chroot "$root" /usr/bin/python3 -c 'import http.server, json, argparse, threading, signal, re; print("ok")' >/dev/null
chroot "$root" /usr/bin/python3 -c 'import vllm.entrypoints.cli.main, torch; print(vllm.__version__, torch._C._cuda_getArchFlags())' >/dev/null
size=$(du -sm "$root" | cut -f1)
echo "standin: rootfs ${size} MB"

common=(--change 'ENTRYPOINT ["/usr/local/bin/vllm", "serve"]'
        --change 'ENV PATH=/usr/local/bin:/usr/bin' --change 'ENV HOME=/root'
        --change 'ENV PYTHONDONTWRITEBYTECODE=1' --change 'ENV PYTHONUNBUFFERED=1'
        --change 'EXPOSE 8000'
        --change "LABEL org.inkling.standin.source=$src_sum")
tar -C "$root" -c . | podman import -q "${common[@]}" - "$repo:lab" >/dev/null
tar -C "$root" -c . | podman import -q "${common[@]}" --change 'ENV STANDIN_FAULT=never_healthy' - "$repo:bad" >/dev/null
tar -C "$root" -c . | podman import -q "${common[@]}" --change 'ENV STANDIN_TORCH_ARCH_FLAGS="sm_75 sm_80 sm_86"' - \
  "$repo:oldarch" >/dev/null
# The faulty builds of the canary analysis (docs/rollout.md): each answers 200 and fails otherwise.
for fault in garbage mm_broken drift slow overload; do
  tar -C "$root" -c . | podman import -q "${common[@]}" --change "ENV STANDIN_FAULT=$fault" - "$repo:${fault/_/}" >/dev/null
done
for t in "${tags[@]}"; do
  echo "standin: built $repo:$t ($(podman image inspect --format '{{.Size}}' "$repo:$t") bytes, id $(podman image inspect --format '{{.Id}}' "$repo:$t" | cut -c1-12))"
done
