#!/bin/bash
# Runs once per node under srun: per-node environment, then a torchrun agent.
NODE_RANK=${SLURM_PROCID:-0}

# node-local scratch for caches
export LOCAL_SCRATCH=${SCRATCH_ROOT:-/tmp/slurm2-work/scratch}/${SLURM_JOB_ID}/node${NODE_RANK}
mkdir -p "$LOCAL_SCRATCH"

# per-node site overrides (module paths, locally installed packages) if the admins ship one
SITE_ENV="${SITE_ENV_DIR:-$PROJ/site}/node${NODE_RANK}.env"
[ -f "$SITE_ENV" ] && source "$SITE_ENV"

LOG_ARGS=()
if [ -n "$TORCHRUN_LOG_DIR" ]; then
  LOG_ARGS=(--log-dir "$TORCHRUN_LOG_DIR/node${NODE_RANK}" --redirects 3 --tee 3)
fi

exec torchrun \
  --nnodes="$NNODES" --nproc-per-node="$GPUS_PER_NODE" \
  --rdzv-backend=c10d --rdzv-endpoint="${RDZV_HOST}:${RDZV_PORT}" --rdzv-id="$SLURM_JOB_ID" \
  --max-restarts=0 "${LOG_ARGS[@]}" \
  "$PROJ/train.py" --stats-cache "$LOCAL_SCRATCH/featstats.pt" "$@"
