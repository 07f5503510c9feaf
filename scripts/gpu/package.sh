#!/usr/bin/env bash
# Builds strata for a lent GPU machine and packs what it needs to run there into
# .gpu/pkg.tar.gz (ignored by git; name .gpu in the device tool's `carry`). The GPU machine has
# the CUDA toolkit, a driver and PyTorch but no Debian packages and no network, so we build here
# (the same nvcc) with CUDA on and MPI off, and carry the binaries plus the shared libraries
# they load (ldd, minus glibc, the driver and the CUDA toolkit's own libraries; NCCL is found
# there by scripts/gpu/run.sh, which unpacks the archive). The binaries find the carried
# libraries by their rpath, $ORIGIN/../lib, then the CUDA toolkit's lib64 (a DT_RPATH, which
# also serves the carried libraries' own dependencies), so nothing is put on LD_LIBRARY_PATH
# there for other programs (python3) to pick up. The tests' training text (Debian's GPL-3,
# which the GPU machine lacks) travels as text/GPL-3.
#
# What travels: strata and the tests labelled cuda (15 binaries, 47 MB) with the libraries they
# load (75 MB, most of it OpenBLAS and ICU's data): 44.2 MB compressed on 2026-11-26, 53.1 MB
# with the DeepSpeed bundle (57.3 MB with the tree, of the 64 MiB = 67.1 MB a call carries). ALL_TESTS=1 adds every other test binary (for run.sh's other_tests
# stage), which does not fit: the tree and the carried paths travel within 64 MiB together.
#
# Usage: [scripts/gpu/deepspeed_bundle.sh]  scripts/gpu/package.sh   then, on the device:
#        OUT=... bash scripts/gpu/run.sh   (its header lists the stages)
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_RPATH='$ORIGIN/../lib;/usr/local/cuda/lib64' \
  -DCMAKE_EXE_LINKER_FLAGS='-Wl,--disable-new-dtags' >/dev/null
staging=$(mktemp -d /tmp/strata-gpu-package.XXXXXX)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/bin" "$staging/lib"
# Tests labelled cuda: the ones that must pass on the GPU (each test is its binary's target).
ctest --test-dir build/gpu -L cuda -N | awk '/Test +#/ {print $3}' > "$staging/cuda_tests.txt"
if [[ ${ALL_TESTS:-0} == 1 ]]; then
  cmake --build build/gpu
else
  mapfile -t targets < "$staging/cuda_tests.txt"
  cmake --build build/gpu --target strata "${targets[@]}"
fi
binaries=(build/gpu/tools/strata)
while read -r t; do
  binaries+=("$(find build/gpu -type f -executable -name "$t" -not -path '*/CMakeFiles/*' | head -1)")
done < "$staging/cuda_tests.txt"
if [[ ${ALL_TESTS:-0} == 1 ]]; then
  mapfile -t -O ${#binaries[@]} binaries < <(find build/gpu -type f -executable -name 'test_*' \
                                               -not -path '*/CMakeFiles/*')
fi
cp "${binaries[@]}" "$staging/bin/"

skip='^(linux-vdso|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|libcuda\.so|libcudart|libcublas|libnccl|libnvidia)'
for bin in "${binaries[@]}"; do
  ldd "$bin" | awk '/=>/ && $3 != "" {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$staging/lib/$name"
done
strip --strip-unneeded "$staging"/bin/* 2>/dev/null || true
for bin in "$staging"/bin/*; do
  if ! readelf -d "$bin" | grep -q 'RPATH.*\$ORIGIN/\.\./lib'; then
    echo "error: $(basename "$bin") has no rpath \$ORIGIN/../lib: $(readelf -d "$bin" | grep -E 'R(UN)?PATH')" >&2
    exit 1
  fi
done
mkdir -p "$staging/text"
cp /usr/share/common-licenses/GPL-3 "$staging/text/GPL-3"
# DeepSpeed for `strata bench step`'s peers, when scripts/gpu/deepspeed_bundle.sh made .deepspeed/
# (optional: without it the DeepSpeed peers say they cannot be imported). There:
# `source scripts/gpu/deepspeed_env.sh` (scripts/gpu/run.sh does).
if [[ -d .deepspeed/wheels ]]; then
  mkdir -p "$staging/deepspeed"
  cp -r .deepspeed/wheels .deepspeed/libaio .deepspeed/MANIFEST "$staging/deepspeed/"
  echo "carrying DeepSpeed: $(du -sh "$staging/deepspeed" | cut -f1) ($(find "$staging/deepspeed/wheels" -name '*.whl' | wc -l) wheels, libaio)"
fi
rm -rf .gpu  # only now: a failed build keeps the last package
mkdir -p .gpu
tar czf .gpu/pkg.tar.gz -C "$staging" .

# What travels: .gpu plus the working tree the device tool copies (tracked files and untracked
# ones git does not ignore), against the 64 MiB a call carries.
bytes=$(du -sb .gpu | cut -f1)
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
             awk '{s += $1} END {print s + 0}')
echo "packed .gpu/pkg.tar.gz: $(du -sh .gpu | cut -f1) ($(ls "$staging/bin" | wc -l) binaries, $(ls "$staging/lib" | wc -l) libraries; $(du -sh "$staging" | cut -f1) unpacked); with the tree $(( (bytes + tree_bytes) / 1024 / 1024 )) MiB of 64"
if (( bytes + tree_bytes > 64 * 1024 * 1024 )); then
  echo "error: .gpu ($bytes bytes) and the tree ($tree_bytes bytes) are over the 64 MiB a device call carries (drop ALL_TESTS=1 or the DeepSpeed bundle)" >&2
  exit 1
fi
