#!/usr/bin/env bash
# Re-runnable: RESULTS=/tmp/cpu13-results bash run_all.sh [scenario...]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${VENV:-/tmp/cpu13-venv}"
RESULTS="${RESULTS:-/tmp/cpu13-results}"
export VENV RESULTS OMP_NUM_THREADS=1
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install torch==2.13.0
  "$VENV/bin/pip" install lightning tensorboard
fi
mkdir -p "$RESULTS/_meta"
{
  echo "date: $(date -u +%FT%TZ)"; uname -a; echo "nproc: $(env -u OMP_NUM_THREADS nproc)"
  "$VENV/bin/python" -V
  "$VENV/bin/python" -c 'import torch, lightning, numpy; print("torch", torch.__version__); print("lightning", lightning.__version__); print("numpy", numpy.__version__)'
  "$VENV/bin/pip" freeze | grep -iE '^(torch|lightning|pytorch-lightning|numpy|tensorboard|pyyaml|torchmetrics)=='
} > "$RESULTS/_meta/versions.txt" 2>&1
start=$(date +%s)
"$VENV/bin/python" "$HERE/harness.py" --results "$RESULTS" --jobs 2 "$@"
echo "batch wall time: $(( $(date +%s) - start ))s"
