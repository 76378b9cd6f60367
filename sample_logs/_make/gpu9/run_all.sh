#!/usr/bin/env bash
# gpu9 harness: RESULTS=/dir [OUT=/dir] [PROFILE=cpu] bash run_all.sh [SCENARIO ...]
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export RESULTS="${RESULTS:-/tmp/gpu9-results}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$RESULTS"
python "$HERE/harness.py" "$@"
rc=$?
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  tar -C "$RESULTS" -czf "$OUT/gpu9_samples.tar.gz" .
  echo "[gpu9] wrote $OUT/gpu9_samples.tar.gz"
fi
exit $rc
