#!/bin/bash
# launch.sh CONFIG [--set k=v ...]: per-task wrapper for `srun launch.sh ...`.
# Maps SLURM's task layout onto torch.distributed's env:// variables and execs the trainer.
set -euo pipefail
PY=${RETRIEVAL_PY:-/work/main/.venv/bin/python}
export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID
export MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)}
if [[ -z ${MASTER_PORT:-} ]]; then
    # no port given: take a free one
    MASTER_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
    export MASTER_PORT
fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "[launch.sh] $(hostname -s) task ${RANK}/${WORLD_SIZE} (local ${LOCAL_RANK}) master ${MASTER_ADDR}:${MASTER_PORT}"
cfg=$1
shift
exec "$PY" train_retrieval.py --config "$cfg" "$@"
