#!/usr/bin/env bash
# gpu7 harness wrapper.  Usage: RESULTS=/dir [OUT=/out] [PROFILE=cpu] bash run_all.sh [scenario ...]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RESULTS="${RESULTS:-/tmp/gpu7-results}"
PY="${PYTHON:-python}"
command -v "$PY" >/dev/null || PY=python3
export PYTHON="$PY"
exec "$PY" "$HERE/run_all.py" "$@"
