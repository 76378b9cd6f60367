#!/bin/bash
# Launcher; NPROC, CONFIG and MASTER_PORT can be set from the environment.
NPROC=${NPROC:-2}
CONFIG=${CONFIG:-configs/run.json}
MASTER_PORT=${MASTER_PORT:-29500}
cd "$(dirname "$0")"
echo "[$(date '+%F %T')] $(hostname): starting $NPROC rank(s), config $CONFIG, port $MASTER_PORT"
exec torchrun --nproc-per-node="$NPROC" --master-port="$MASTER_PORT" train.py --config "$CONFIG" "$@"
