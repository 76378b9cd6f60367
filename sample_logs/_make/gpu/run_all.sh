#!/usr/bin/env bash
# Produce every gpu-* sample in one go on a machine with 2 GPUs (or a CPU subset: PROFILE=cpu).
# Usage: run_all.sh [SCENARIO ...]   (default: all). Results in $RESULTS (default /tmp/tinygpt-results);
# when $OUT is set (the device machine), also packed into $OUT/gpu_samples.tar.gz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/tinygpt-results}
PROFILE=${PROFILE:-gpu}
mkdir -p "$RESULTS/_meta"
{
  hostname
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  python3 -c 'import sys; print(sys.version)'
  python3 -c 'import megatron.core; print("megatron-core", megatron.core.__version__)' 2>&1 | tail -1
  python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
} > "$RESULTS/_meta/versions.txt"
python3 "$HERE/run_all.py" --results "$RESULTS" --profile "$PROFILE" "$@" 2>&1 | tee "$RESULTS/_meta/run_all.log"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/gpu_samples.tar.gz" -C "$RESULTS" .
  ls -la "$OUT"
fi
