# Source this on the lent GPU machine (no network, no Debian packages) to make DeepSpeed
# importable from the bundle that scripts/gpu/deepspeed_bundle.sh made here:
#   source scripts/gpu/deepspeed_env.sh [BUNDLE (default .gpu/deepspeed, else .deepspeed)]
# It installs the bundle's wheels with the machine's python3 (--no-index --find-links: nothing
# is fetched) into BUNDLE/site (pip --target; once: a second source reuses it) and puts that first on
# PYTHONPATH (the machine's torch stays the one imported); each wheel of BUNDLE/wheels/extra only
# where python3 cannot import it already. With DS_VENV=DIR it makes a venv there instead
# (--system-site-packages, for the machine's torch) and activates it.
# Exports, for the ops DeepSpeed compiles on first use (its CPU Adam, and async_io for the NVMe
# offload): CPATH, LIBRARY_PATH, LD_LIBRARY_PATH with the bundle's libaio; CUDA_HOME (the folder
# above nvcc's bin/), TORCH_CUDA_ARCH_LIST=9.0 (H100), DS_BUILD_OPS=0. Returns non-zero (and
# says why) when DeepSpeed still does not import.
_ds_main() {
  local bundle=${1:-}
  if [[ -z $bundle ]]; then
    for bundle in .gpu/deepspeed .deepspeed; do [[ -d $bundle/wheels ]] && break; done
  fi
  if [[ ! -d $bundle/wheels ]]; then
    echo "deepspeed_env: no bundle (wheels/) at ${bundle}; make one with scripts/gpu/deepspeed_bundle.sh" >&2
    return 1
  fi
  bundle=$(cd "$bundle" && pwd)
  local py=${PYTHON:-python3}
  local wheels=("$bundle"/wheels/*.whl)
  # The extras (einops, msgpack, ninja, py-cpuinfo, packaging, psutil, tqdm, typing-extensions),
  # each only where it is missing (typing_extensions: where it lacks Sentinel, which pydantic-core
  # imports); all in one pip call, so that --target's bin/ holds every package's scripts.
  local whl name check
  for whl in "$bundle"/wheels/extra/*.whl; do
    [[ -e $whl ]] || continue
    name=$(basename "$whl" | cut -d- -f1)
    case $name in
      py_cpuinfo) check="import cpuinfo" ;;
      typing_extensions) check="from typing_extensions import Sentinel" ;;
      *) check="import $name" ;;
    esac
    "$py" -c "$check" 2>/dev/null || wheels+=("$whl")
  done
  local pip=(-m pip install --quiet --disable-pip-version-check --no-index --no-deps)
  export PIP_ROOT_USER_ACTION=ignore
  if [[ -n ${DS_VENV:-} ]]; then
    [[ -x $DS_VENV/bin/python ]] || "$py" -m venv --system-site-packages "$DS_VENV" || return 1
    # shellcheck disable=SC1091
    source "$DS_VENV/bin/activate"
    python "${pip[@]}" "${wheels[@]}" || return 1
    py=python
  else
    local site=$bundle/site
    if [[ ! -d $site/deepspeed ]]; then
      "$py" "${pip[@]}" --target "$site" "${wheels[@]}" || return 1
    fi
    case ":${PYTHONPATH:-}:" in
      *":$site:"*) ;;
      *) export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
    export PATH="$site/bin:$PATH"
  fi

  local aio
  aio=$(find "$bundle/libaio" -name 'libaio.so.1*' -print -quit 2>/dev/null)
  if [[ -n $aio ]]; then
    local libdir incdir
    libdir=$(dirname "$aio")
    incdir=$bundle/libaio/usr/include
    export CPATH="$incdir${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    echo "deepspeed_env: no libaio in $bundle/libaio: the NVMe offload (async_io) will not build" >&2
  fi
  local nvcc
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -1)
  if [[ -n $nvcc ]]; then
    export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$nvcc")")")}
    export PATH="$CUDA_HOME/bin:$PATH"
  else
    echo "deepspeed_env: nvcc not found: DeepSpeed cannot compile its CPU Adam" >&2
  fi
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  export DS_BUILD_OPS=0
  "$py" -c 'import deepspeed, sys; print(f"deepspeed {deepspeed.__version__} from {deepspeed.__file__}", file=sys.stderr)' ||
    { echo "deepspeed_env: deepspeed does not import with $py" >&2; return 1; }
  echo "deepspeed_env: CUDA_HOME=${CUDA_HOME:-unset} TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST libaio=${aio:-none}" >&2
}
_ds_main "$@"
_ds_rc=$?
unset -f _ds_main
(exit $_ds_rc)
