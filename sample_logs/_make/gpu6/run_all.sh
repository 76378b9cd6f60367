#!/usr/bin/env bash
# gpu6: run sftkit failure scenarios and collect their logs.
#   RESULTS=/dir [OUT=/out] [PROFILE=cpu] bash run_all.sh [SCENARIO ...]
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export RESULTS="${RESULTS:-/tmp/gpu6-results}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY="$(command -v python || command -v python3)"
export PYTHON="$PY"
exec "$PY" "$HERE/harness.py" "$@"
