#!/usr/bin/env bash
# Run the gpu2 failure scenarios.  Usage:
#   RESULTS=/some/dir [PROFILE=gpu|cpu] [OUT=/dir] [JOBS=N] bash run_all.sh [SCENARIO ...]
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${RESULTS:?set RESULTS=/some/dir}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec python3 "$HERE/run_all.py" "$@"
