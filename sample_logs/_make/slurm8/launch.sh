#!/bin/bash
# Launcher wrapper: one process per srun task. Maps SLURM's task layout onto torch.distributed's
# environment (unless torchrun already set it) and runs the trainer with the venv's interpreter.
set -o pipefail
export RANK=${RANK:-${SLURM_PROCID:-0}}
export WORLD_SIZE=${WORLD_SIZE:-${SLURM_NTASKS:-1}}
export LOCAL_RANK=${LOCAL_RANK:-${SLURM_LOCALID:-0}}
if [[ -z ${MASTER_ADDR:-} ]]; then
    MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
    export MASTER_ADDR
fi
export MASTER_PORT=${MASTER_PORT:-$((20000 + ${SLURM_JOB_ID:-0} % 20000))}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
PY=${NMT_PYTHON:-python}
exec "$PY" -u train.py "$@"
