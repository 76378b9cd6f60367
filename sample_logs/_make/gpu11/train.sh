#!/bin/bash
# Launcher: defaults can be overridden from the environment.
NPROC=${NPROC:-2}
CONFIG=${CONFIG:-configs/run.json}
MASTER_PORT=${MASTER_PORT:-29500}
cd "$(dirname "$0")"
echo "[$(date '+%F %T')] launching $NPROC rank(s) on $(hostname), config=$CONFIG"
exec torchrun --nproc-per-node="$NPROC" --master-port="$MASTER_PORT" train.py --config "$CONFIG" "$@"
