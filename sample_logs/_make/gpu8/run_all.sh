#!/usr/bin/env bash
# Runs the gpu8 failure scenarios. Usage: RESULTS=/dir [OUT=/out] [PROFILE=cpu] bash run_all.sh [NAME ...]
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY="$(command -v python || command -v python3)"
exec "$PY" "$HERE/run_all.py" "$@"
