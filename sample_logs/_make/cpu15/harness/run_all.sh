#!/usr/bin/env bash
# Run every scenario, two at a time (the machine has 2 cores).
cd "$(dirname "$0")"
ALL="shape-rank1 missing-shard-rank2 host-oom-rank1 sigkill-rank1 scaling-config import-metric ckpt-resume-rank1 early-stop-hang nan-rank1 raydata-schema raydata-transform heads-divisibility"
printf '%s\n' ${@:-$ALL} | xargs -P 2 -I{} sh -c './run_scenario.sh {} > /tmp/cpu15-harness-{}.txt 2>&1'
