#!/bin/bash
# RESULTS=/some/dir bash run_all.sh [SCENARIO...]
#   PROFILE=cpu  -> only the scenarios that run on gloo/CPU
#   OUT=/dir     -> also pack $RESULTS into $OUT/gpu5_samples.tar.gz
set -e
: "${RESULTS:?set RESULTS=/some/dir}"
export RESULTS=$(realpath -m "$RESULTS")
if [ -n "$OUT" ]; then export OUT=$(realpath -m "$OUT"); fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")"
exec python3 run_all.py "$@"
