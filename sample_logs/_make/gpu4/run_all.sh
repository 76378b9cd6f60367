#!/usr/bin/env bash
# RESULTS=/some/dir [PROFILE=cpu] [OUT=/dir] bash run_all.sh [SCENARIO ...]
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${RESULTS:?set RESULTS=/some/dir}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$RESULTS"
exec python3 "$HERE/run_all.py" "$@"
