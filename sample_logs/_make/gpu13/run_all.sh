#!/bin/bash
# Usage: RESULTS=/dir [PROFILE=gpu|cpu] [OUT=/out] [MAX_PAR=3] bash run_all.sh [scenario ...]
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec python "$HERE/run_all.py" "$@"
