#!/usr/bin/env bash
# The GPU check in one command: on a machine with an NVIDIA GPU, make the GPU worker's two
# environments (if not given), build a small dataset, and run the loader benchmark with MXNet
# (mxnet-cu112, in its own environment) and DALI (CUDA 12) on the GPU. Prints img/s, GPU memory
# and whether MXNet's kernels run natively, on compatible machine code, through PTX or not at all
# (sm_90 and later: it stops, exit 2; use benchmarks/gpu_check_torch.py, docs/gpu-worker.md).
# Under 8 minutes including installs.
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine; output for docs/gpu-worker.md
#   bash benchmarks/gpu_check.sh --cpu      # dry run on any machine, with `make venv`'s envs
#
# Environments: RECFORGE_CORE_PYTHON (core + DALI) and RECFORGE_MXNET_PYTHON (MXNet) when set;
# else --cpu uses .venv and .venv-mxnet, and the GPU run builds .venv-gpu (requirements-gpu.txt)
# and .venv-mxnet-gpu (requirements-mxnet-gpu.txt) with uv from the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
device=gpu
args=()
for a in "$@"; do
  case "$a" in
    --cpu) device=cpu ;;
    *) args+=("$a") ;;
  esac
done
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

make_env() {  # make_env DIR REQUIREMENTS CONSTRAINTS
  [ -x "$1/bin/python" ] && [ -f "$1/.installed" ] && return
  echo "gpu_check: installing $2 into $1"
  "$PYTHON" -m venv "$1"
  "$1/bin/python" -m pip install -q uv==0.13.9
  "$1/bin/uv" pip install -q --python "$1/bin/python" -r "$2" -c "$3" -e .
  touch "$1/.installed"
}

if [ "$device" = cpu ]; then
  core=${RECFORGE_CORE_PYTHON:-.venv/bin/python}
  export RECFORGE_MXNET_PYTHON=${RECFORGE_MXNET_PYTHON:-$PWD/.venv-mxnet/bin/python}
else
  command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: no NVIDIA GPU here (use --cpu for the dry run)" >&2; exit 2; }
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  if [ -z "${RECFORGE_CORE_PYTHON:-}" ]; then make_env .venv-gpu requirements-gpu.txt constraints.txt; fi
  if [ -z "${RECFORGE_MXNET_PYTHON:-}" ]; then make_env .venv-mxnet-gpu requirements-mxnet-gpu.txt constraints-mxnet-gpu.txt; fi
  core=${RECFORGE_CORE_PYTHON:-.venv-gpu/bin/python}
  export RECFORGE_MXNET_PYTHON=${RECFORGE_MXNET_PYTHON:-$PWD/.venv-mxnet-gpu/bin/python}
  # libmxnet.so (mxnet-cu112) finds the CUDA 11 wheels' libraries through LD_LIBRARY_PATH here
  nv=$("$RECFORGE_MXNET_PYTHON" -c 'import glob, importlib.util, os; r = importlib.util.find_spec("nvidia").submodule_search_locations; print(":".join(sorted(d for x in r for d in glob.glob(os.path.join(x, "*", "lib")))))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="${nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
exec "$core" benchmarks/gpu_check.py --device "$device" ${args[@]+"${args[@]}"}
