#!/usr/bin/env bash
# Builds, on this machine (which reaches PyPI and Debian), what DeepSpeed needs to run on the lent
# GPU machine (torch, transformers and the CUDA toolkit there; no network, no Debian packages), as
# a folder small enough to carry with the tree (the device tool carries at most 64 MiB in all):
#   wheels/  deepspeed (DS_BUILD_OPS=0: pure Python; its ops compile themselves there on first
#            use), pydantic + pydantic-core (downloaded together: pydantic pins pydantic-core
#            exactly), annotated-types, typing-inspection, hjson, for --python-version (3.12) on
#            manylinux2014_x86_64; wheels/extra/: einops, msgpack, ninja, py-cpuinfo, packaging,
#            psutil, tqdm, typing-extensions (installed there only where missing)
#   libaio/  Debian's libaio1 + libaio-dev unpacked (dpkg -x): the header and the library that
#            DeepSpeed's async_io op (the NVMe path, ZeRO-Infinity) builds and links against
# On the GPU machine: `source scripts/gpu/deepspeed_env.sh` installs the wheels with no network
# and exports the paths (see there). scripts/gpu/package.sh carries the folder into .gpu/ when it
# is there. The folder is ignored by git.
#
# Usage: scripts/gpu/deepspeed_bundle.sh [OUT_DIR (default .deepspeed)]
#   environment: DS_VERSION (default: the newest), PY_VERSION (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.deepspeed}
py_version=${PY_VERSION:-3.12}
ds_spec="deepspeed${DS_VERSION:+==$DS_VERSION}"

rm -rf "$out"
mkdir -p "$out/wheels" "$out/libaio"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
chmod 755 "$work"  # apt-get download runs as _apt where it can
trap 'rm -rf "$work"' EXIT

# The DeepSpeed wheel: built from its sdist in a throwaway venv holding only the build tools
# (--no-build-isolation: its setup.py must not fetch torch; without torch it builds no op, which
# DS_BUILD_OPS=0 asks for anyway).
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip wheel setuptools
DS_BUILD_OPS=0 "$work/venv/bin/pip" wheel --quiet --no-deps --no-build-isolation \
  --wheel-dir "$out/wheels" "$ds_spec"

# Its dependencies that the GPU machine lacks. extra/: those it may or may not have (torch,
# transformers and accelerate bring some; ninja runs the JIT builds of the ops; pydantic-core
# imports typing_extensions.Sentinel, 4.14+); deepspeed_env.sh installs each of those only where
# it does not import. numpy is not carried (transformers needs it: it is there).
dl() {
  "$work/venv/bin/pip" download --quiet --no-deps --only-binary=:all: --python-version "$py_version" \
    --platform manylinux2014_x86_64 --dest "$@"
}
dl "$out/wheels" pydantic pydantic-core annotated-types typing-inspection hjson
dl "$out/wheels/extra" einops msgpack ninja py-cpuinfo packaging psutil tqdm typing-extensions

# libaio from Debian, unpacked into a prefix (usr/include/libaio.h, usr/lib/x86_64-linux-gnu/).
# Debian 12 names the runtime package libaio1; newer releases libaio1t64.
(cd "$work" && { apt-get download libaio1 2>/dev/null || apt-get download libaio1t64; } &&
  apt-get download libaio-dev)
for deb in "$work"/*.deb; do dpkg -x "$deb" "$out/libaio"; done
lib=$(dirname "$(find "$out/libaio" -name 'libaio.so.1*' -print -quit)")
# libaio-dev's libaio.so points at the runtime's soname; make sure the link-time name resolves.
if [[ ! -e $lib/libaio.so ]]; then
  ln -sf "$(basename "$(find "$lib" -name 'libaio.so.1*' -print -quit)")" "$lib/libaio.so"
fi
test -f "$out/libaio/usr/include/libaio.h"

{
  echo "# made by scripts/gpu/deepspeed_bundle.sh on $(date -u +%FT%TZ)"
  (cd "$out/wheels" && find . -name '*.whl' | sort)
  (cd "$out/libaio" && find . -name 'libaio*' | sort)
} > "$out/MANIFEST"
compressed=$(tar -C "$(dirname "$out")" -czf - "$(basename "$out")" | wc -c)
echo "deepspeed bundle in $out: $(du -sh "$out" | cut -f1) on disk, $((compressed / 1024)) KiB gzipped"
cat "$out/MANIFEST"
if (( compressed > 20 * 1024 * 1024 )); then
  echo "error: the bundle is over 20 MiB compressed; too big to carry with the tree" >&2
  exit 1
fi
