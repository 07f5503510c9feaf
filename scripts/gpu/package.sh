#!/usr/bin/env bash
# Builds strata for a lent GPU machine and packs what it needs to run there into .gpu/
# (ignored by git; name it in the device tool's `carry`). The GPU machine has the CUDA
# toolkit, a driver and PyTorch but no Debian packages and no network, so we build here
# (the same nvcc) with CUDA on and MPI off, and carry the binaries plus the shared libraries
# they load (ldd, minus glibc, the driver and the CUDA toolkit's own libraries; NCCL is found
# there by scripts/gpu/run.sh).
#
# Usage: [scripts/gpu/deepspeed_bundle.sh]  scripts/gpu/package.sh   then, on the device:
#        bash scripts/gpu/run.sh   (BENCH_STEP=1 also runs strata bench step with its peers)
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build/gpu

rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib
mapfile -t binaries < <(find build/gpu -type f -executable \( -name 'test_*' -o -name strata \) \
                        -not -path '*/CMakeFiles/*')
cp "${binaries[@]}" .gpu/bin/
# Tests labelled cuda: the ones that must pass on the GPU.
ctest --test-dir build/gpu -L cuda -N | awk '/Test +#/ {print $3}' > .gpu/cuda_tests.txt

skip='^(linux-vdso|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|libcuda\.so|libcudart|libcublas|libnccl|libnvidia)'
for bin in "${binaries[@]}"; do
  ldd "$bin" | awk '/=>/ && $3 != "" {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" ".gpu/lib/$name"
done
strip --strip-unneeded .gpu/bin/* 2>/dev/null || true
# DeepSpeed for `strata bench step`'s peers, when scripts/gpu/deepspeed_bundle.sh made .deepspeed/
# (optional: without it the DeepSpeed peers say they cannot be imported). There:
# `source scripts/gpu/deepspeed_env.sh` (scripts/gpu/run.sh does).
if [[ -d .deepspeed/wheels ]]; then
  mkdir -p .gpu/deepspeed
  cp -r .deepspeed/wheels .deepspeed/libaio .deepspeed/MANIFEST .gpu/deepspeed/
  echo "carrying DeepSpeed: $(du -sh .gpu/deepspeed | cut -f1) ($(find .gpu/deepspeed/wheels -name '*.whl' | wc -l) wheels, libaio)"
fi

bytes=$(du -sb .gpu | cut -f1)
echo "packed .gpu: $(du -sh .gpu | cut -f1) ($(ls .gpu/bin | wc -l) binaries, $(ls .gpu/lib | wc -l) libraries)"
if (( bytes > 60 * 1024 * 1024 )); then
  echo "error: .gpu is over 60 MiB; the device tool carries at most 64 MiB with the tree" >&2
  exit 1
fi
