#!/usr/bin/env bash
# Installs the Debian 12 packages strata builds and tests with. Idempotent and quiet:
# when nothing is missing it only runs one dpkg-query and returns.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3
  ccache                                  # compiler cache (~/.cache/ccache, outside the clone): CI rebuilds
  clang libomp-dev libclang-rt-14-dev      # the tsan preset: clang with its own OpenMP runtime
  liburing-dev fio libhwloc-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libopenblas-dev libopenmpi-dev openmpi-bin
  libxxhash-dev
  libpcre2-dev libicu-dev                 # models/tokenizer: regexes (UTF, UCP), NFC
  python3-torch python3-numpy             # tests/reference: comparisons with PyTorch (/usr/bin/python3)
  librsvg2-bin                            # rsvg-convert: tests/tools/check_chart_render.py renders the SVG charts
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
