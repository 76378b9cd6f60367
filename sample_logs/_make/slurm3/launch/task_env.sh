#!/bin/bash
# Per-task launcher: rebuild the login environment inside every srun task, then
# hand over to the trainer (exec, so SLURM's signals reach python directly).
set -e

# what `module load gcc/12.2.0 python/3.11.7 openmpi/4.1.5` exports on this cluster
export MODULEPATH=/etc/environment-modules/modules:/usr/share/modulefiles
export LOADEDMODULES=gcc/12.2.0:python/3.11.7:openmpi/4.1.5
export CC=gcc CXX=g++ FC=gfortran

# one compute thread per allocated cpu
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export MKL_NUM_THREADS=$OMP_NUM_THREADS

# rendezvous: first node of the allocation, port from the job id
export MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)}
export MASTER_PORT=${MASTER_PORT:-$((15000 + SLURM_JOB_ID % 20000))}
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}

cd "$SLURM_SUBMIT_DIR"
source .venv/bin/activate
export PYTHONUNBUFFERED=1

if [ "${SLURM_PROCID:-0}" = 0 ]; then
    echo "task_env: host=$(hostname) job=$SLURM_JOB_ID step=$SLURM_STEP_ID ntasks=$SLURM_NTASKS" \
         "master=$MASTER_ADDR:$MASTER_PORT python=$(command -v python)"
fi
exec python train.py "$@"
