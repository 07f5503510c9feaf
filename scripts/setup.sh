#!/usr/bin/env bash
# Installs the Debian 12 packages strata builds and tests with, then the build venv of the
# Python package (python/): build/pyenv in this clone. Idempotent and quiet: when nothing is
# missing it runs one dpkg-query, compares one stamp file and returns.
set -euo pipefail
cd "$(dirname "$0")/.."

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
  libcpp-httplib-dev                      # serve/: the HTTP server of `strata serve`
  python3-torch python3-numpy             # tests/reference: comparisons with PyTorch (/usr/bin/python3)
  librsvg2-bin                            # rsvg-convert: tests/tools/check_chart_render.py renders the SVG charts
  python3-dev python3-venv                # python/: the extension's headers, and its build venv
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -gt 0 ]]; then
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
fi

# The Python package's build venv: nanobind, scikit-build-core and pytest (PyPI, pinned in
# python/requirements-dev.txt) over Debian's /usr/bin/python3 (not the first python3 on PATH,
# which may be a pyenv one without torch), made with --system-site-packages so that
# python3-torch is importable from it. It lives in the clone (build/pyenv), beside the build
# folders it serves: the release preset finds it there (python/detect.cmake), `rm -rf build`
# removes it with them, and two clones never share or race on one venv; pip's own cache
# (~/.cache/pip) keeps a fresh clone's install to seconds. The stamp is the requirements file
# the venv was made from, so a changed pin reinstalls.
venv=build/pyenv
reqs=python/requirements-dev.txt
if [[ -f $reqs ]] && ! cmp -s "$reqs" "$venv/.requirements"; then
  echo "setup: making the Python build venv $venv"
  mkdir -p build
  [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs"
  # The build backend's wheels, for the pip-install test (python/tests/test_install.py): it
  # installs into a fresh venv with pip's build isolation from these, offline.
  "$venv/bin/python" -m pip download -q --disable-pip-version-check -d "$venv/wheelhouse" \
    $(grep -E '^(nanobind|scikit-build-core)==' "$reqs")
  cp "$reqs" "$venv/.requirements"
fi
