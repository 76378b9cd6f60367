#!/bin/bash
# launch.sh: per-task wrapper.  Pins threads, enforces our share of the job's memory (the cluster
# does not: no cgroups here), then execs the trainer with the given arguments.
set -u
PY=${TSF_PYTHON:-/work/main/.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONUNBUFFERED=1
if [[ -n ${SLURM_MEM_PER_NODE:-} && ${TSF_ENFORCE_MEM:-1} == 1 ]]; then
    tpn=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-1}}; tpn=${tpn%%(*}
    per_task_kb=$(( SLURM_MEM_PER_NODE * 1024 / tpn ))
    ulimit -v "$per_task_kb"
fi
exec "$PY" "$(dirname "$0")/train.py" "$@"
