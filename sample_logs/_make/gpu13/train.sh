#!/bin/bash
# Launcher; NPROC, CONFIG and MASTER_PORT may be set in the environment. Extra arguments are config overrides.
NPROC=${NPROC:-2}
CONFIG=${CONFIG:-configs/run.toml}
MASTER_PORT=${MASTER_PORT:-29500}
cd "$(dirname "$0")"
echo "[$(date '+%F %T')] $(hostname): launching $NPROC rank(s) with $CONFIG on port $MASTER_PORT"
exec torchrun --nproc-per-node="$NPROC" --master-port="$MASTER_PORT" train.py --config "$CONFIG" "$@"
