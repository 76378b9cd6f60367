#!/bin/bash
# Generate real SLURM failure logs for the slurm2-* scenarios.
#
#   RESULTS=/tmp/slurm2-results bash run_all.sh [SCENARIO...]
#
# Each scenario is submitted to the local single-node cluster, waited for (with a
# wall-clock guard), and whatever the job wrote is copied unchanged into
# $RESULTS/slurm2-<scenario>/ together with sacct.txt.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RESULTS=${RESULTS:?set RESULTS=/output/dir}
WORK_ROOT=${WORK_ROOT:-/tmp/slurm2-work}
PROJ=$WORK_ROOT/resmlp            # staged copy of the code: tracebacks show this path
PY=/work/main/.venv/bin/python
SLURM_CTL=/work/main/tests/slurm/local-slurm.sh

ALL=(timelimit scancel host-oom shape-mismatch missing-shard ckpt-truncated hang-stale-lock
     sigkill-rank argparse-option rdzv-unreachable import-stale-node srun-too-many-tasks)

say() { echo "[run_all $(date +%T)] $*" >&2; }

# ---------------------------------------------------------------- cluster / staging
ensure_cluster() {
  if ! sinfo -h -o %t 2>/dev/null | grep -q -E 'idle|mix|alloc'; then
    say "bringing local slurm up"
    bash "$SLURM_CTL" up >&2 || { say "cluster did not come up"; exit 1; }
  fi
}

stage_code() {
  rm -rf "$PROJ"; mkdir -p "$PROJ"
  cp -r "$HERE/train.py" "$HERE/prepare_data.py" "$HERE/lib" "$HERE/scripts" "$HERE/sbatch" "$PROJ/"
  find "$PROJ" -name __pycache__ -prune -exec rm -rf {} +
  mkdir -p "$WORK_ROOT/shared"
  rm -rf "$WORK_ROOT/shared/pylib-0.3"; cp -r "$HERE/fixtures/pylib-0.3" "$WORK_ROOT/shared/pylib-0.3"
}

# experiment dir with a neutral name (no scenario name leaks into logged paths)
new_exp() {
  local d="$WORK_ROOT/exp/$(echo "$1" | md5sum | cut -c1-8)"
  rm -rf "$d"; mkdir -p "$d/logs"; echo "$d"
}

make_data() {  # make_data DIR [prepare_data args...]
  local d=$1; shift
  "$PY" "$PROJ/prepare_data.py" --out "$d" --rows 8192 "$@" >&2
}

# clean environment for sbatch (it exports the caller's environment to the job)
sb() {  # sb EXPDIR [VAR=val ...] -- [sbatch args...] SCRIPT
  local exp=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  (cd "$PROJ" && env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK \
       -u GPUS_PER_NODE -u EXTRA_ARGS -u TORCHRUN_LOGS -u TORCHRUN_LOG_DIR -u SITE_ENV_DIR -u PYTHONPATH -u RESULTS \
       PROJ="$PROJ" "${envs[@]}" sbatch --parsable --chdir="$exp" "$@") | cut -d';' -f1
}

job_state() { squeue -h -j "$1" -o %T 2>/dev/null; }

wait_running() {  # wait_running ID TIMEOUT
  local t=0
  while [ $t -lt "$2" ]; do
    [ "$(job_state "$1")" = RUNNING ] && return 0
    [ -z "$(job_state "$1")" ] && return 1
    sleep 1; t=$((t + 1))
  done
  return 1
}

wait_for_text() {  # wait_for_text FILEGLOB REGEX TIMEOUT
  local t=0
  while [ $t -lt "$3" ]; do
    # shellcheck disable=SC2086
    grep -q -E "$2" $1 2>/dev/null && return 0
    sleep 1; t=$((t + 1))
  done
  return 1
}

wait_done() {  # wait_done ID GUARD_SECONDS
  local id=$1 guard=$2 t=0
  while [ -n "$(job_state "$id")" ]; do
    if [ $t -ge "$guard" ]; then
      say "job $id exceeded guard ${guard}s, cancelling"
      scancel "$id"; sleep 10
      echo "guard" >"$WORK_ROOT/guard-$id"
      break
    fi
    sleep 2; t=$((t + 2))
  done
  # let accounting settle
  for _ in $(seq 1 30); do
    local st
    st=$(sacct -n -X -j "$id" -o State 2>/dev/null | head -n1 | tr -d ' ')
    case "$st" in ""|RUNNING|PENDING|COMPLETING) sleep 1 ;; *) break ;; esac
  done
  # very short jobs can still show JobName=allocation for a moment
  for _ in $(seq 1 10); do
    sacct -n -X -j "$id" -o JobName 2>/dev/null | grep -q allocation || break
    sleep 1
  done
  sleep 2
}

collect() {  # collect SCENARIO EXPDIR JOBID
  local scn=$1 exp=$2 id=$3 dest="$RESULTS/slurm2-$1"
  rm -rf "$dest"; mkdir -p "$dest"
  (cd "$exp" && find . -path ./data -prune -o -path ./checkpoints -prune -o -type f -print \
     | grep -E "(^|[-_/])${id}([-_./]|$)" | while read -r f; do
         mkdir -p "$dest/$(dirname "$f")"; cp -p "$f" "$dest/$f"; done)
  # torchrun --log-dir trees are named after the job id
  if [ -d "$exp/logs/torchrun-$id" ]; then cp -rp "$exp/logs/torchrun-$id" "$dest/logs/"; fi
  sacct -j "$id" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList >"$dest/sacct.txt" 2>&1
  say "$scn: job $id -> $dest ($(sacct -n -X -j "$id" -o State,ExitCode | head -n1 | xargs))"
}

rank_pid() {  # rank_pid JOBID RANK -> pid of the python worker with that global rank
  local id=$1 r=$2 p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_JOB_ID=$id" || continue
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "RANK=$r" || continue
    grep -q 'train.py' "$p/cmdline" 2>/dev/null || continue
    basename "$p"; return 0
  done
  return 1
}

# ---------------------------------------------------------------- scenarios
S=$PROJ/sbatch

sc_timelimit() {    # style A: srun per rank, --time=00:01:00
  local e; e=$(new_exp timelimit); make_data "$e/data" --shards 4
  local id; id=$(sb "$e" EXTRA_ARGS="--epochs 1000 --save-every 200" -- --time=00:01:00 "$S/ddp_srun.sbatch")
  wait_done "$id" 240; collect timelimit "$e" "$id"
}

sc_scancel() {      # style B: torchrun per node, cancelled by the user mid-training
  local e; e=$(new_exp scancel); make_data "$e/data" --shards 4
  local id; id=$(sb "$e" EXTRA_ARGS="--epochs 50" -- "$S/ddp_torchrun.sbatch")
  wait_running "$id" 60
  wait_for_text "$e/logs/*-$id.out" "step 100/" 120 || say "scancel: no training progress seen"
  sleep 3; say "scancel $id"; scancel "$id"
  wait_done "$id" 120; collect scancel "$e" "$id"
}

sc_host_oom() {     # style D: per-task files; rank 3's shard header claims 3e9 rows
  local e; e=$(new_exp host-oom); make_data "$e/data" --shards 4 --header-rows 3=3000000000
  local id; id=$(sb "$e" -- "$S/ddp_pertask.sbatch")
  wait_done "$id" 180; collect host-oom "$e" "$id"
}

sc_shape_mismatch() {  # style C: srun --label, 6 ranks; shard 5 exported with 48 features
  local e; e=$(new_exp shape-mismatch); make_data "$e/data" --shards 6 --shard-features 5=48
  local id; id=$(sb "$e" -- --ntasks=6 "$S/ddp_label.sbatch")
  wait_done "$id" 180; collect shape-mismatch "$e" "$id"
}

sc_missing_shard() {   # style B with torchrun --log-dir/--tee; part-00001.bin was never written
  local e; e=$(new_exp missing-shard); make_data "$e/data" --shards 4 --drop-shard 1
  local id; id=$(sb "$e" TORCHRUN_LOGS=1 -- "$S/ddp_torchrun.sbatch")
  wait_done "$id" 180; collect missing-shard "$e" "$id"
}

sc_ckpt_truncated() {  # style D: a first job checkpoints, rank 2's file gets truncated, the resume job dies
  local e; e=$(new_exp ckpt-truncated); make_data "$e/data" --shards 4
  local id0; id0=$(sb "$e" EXTRA_ARGS="--max-steps 60 --save-every 30" -- "$S/ddp_pertask.sbatch")
  wait_done "$id0" 240
  local f="$e/checkpoints/step_000060/rank02.pt"
  if [ ! -f "$f" ]; then say "ckpt-truncated: first job did not write $f"; return; fi
  truncate -s $(( $(stat -c %s "$f") * 2 / 5 )) "$f"     # partial write (node lost mid-save)
  local id; id=$(sb "$e" EXTRA_ARGS="--resume auto --max-steps 400 --save-every 100" -- "$S/ddp_pertask.sbatch")
  wait_done "$id" 180; collect ckpt-truncated "$e" "$id"
}

sc_hang_stale_lock() {  # style C: an exporter process still holds LOCK_EX on shard 1, rank 1 blocks forever
  local e; e=$(new_exp hang-stale-lock); make_data "$e/data" --shards 4
  # the holder execs into sleep, so $! is the very process that owns the lock
  ( exec 9>"$e/data/part-00001.bin.lock"; flock -x 9; exec sleep 900 ) &
  local holder=$!
  local id; id=$(sb "$e" -- "$S/ddp_label.sbatch")
  wait_done "$id" 300; collect hang-stale-lock "$e" "$id"
  kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
}

sc_sigkill_rank() {  # style B: global rank 3 is SIGKILLed from outside mid-training
  local e; e=$(new_exp sigkill-rank); make_data "$e/data" --shards 4
  local id; id=$(sb "$e" EXTRA_ARGS="--epochs 50" -- "$S/ddp_torchrun.sbatch")
  wait_running "$id" 60
  wait_for_text "$e/logs/*-$id.out" "step 75/" 120 || say "sigkill: no training progress seen"
  local pid; pid=$(rank_pid "$id" 3)
  if [ -n "$pid" ]; then say "kill -9 rank 3 (pid $pid)"; kill -9 "$pid"; else say "sigkill: rank 3 pid not found"; fi
  wait_done "$id" 180; collect sigkill-rank "$e" "$id"
}

sc_argparse_option() {  # style A: the launch line passes an option train.py no longer has
  local e; e=$(new_exp argparse-option); make_data "$e/data" --shards 4
  local id; id=$(sb "$e" EXTRA_ARGS="--grad-accum-steps 4" -- "$S/ddp_srun.sbatch")
  wait_done "$id" 120; collect argparse-option "$e" "$id"
}

sc_rdzv_unreachable() {  # style A: MASTER_ADDR left over in the submitting shell (a node of an earlier allocation, no longer resolvable)
  local e; e=$(new_exp rdzv-unreachable); make_data "$e/data" --shards 4
  local id; id=$(sb "$e" MASTER_ADDR=vm017 -- "$S/ddp_srun.sbatch")
  wait_done "$id" 240; collect rdzv-unreachable "$e" "$id"
}

sc_import_stale_node() {  # style B: node 1's site env puts an old tinydata first on PYTHONPATH
  local e; e=$(new_exp import-stale-node); make_data "$e/data" --shards 4
  mkdir -p "$e/site"
  echo "export PYTHONPATH=$WORK_ROOT/shared/pylib-0.3\${PYTHONPATH:+:\$PYTHONPATH}" >"$e/site/node1.env"
  local id; id=$(sb "$e" SITE_ENV_DIR="$e/site" -- "$S/ddp_torchrun.sbatch")
  wait_done "$id" 240; collect import-stale-node "$e" "$id"
}

sc_srun_too_many_tasks() {  # style A: GPUS_PER_NODE=8 from the submitting shell, allocation has 4 tasks
  local e; e=$(new_exp srun-too-many-tasks); make_data "$e/data" --shards 4
  local id; id=$(sb "$e" GPUS_PER_NODE=8 -- "$S/ddp_srun.sbatch")
  wait_done "$id" 120; collect srun-too-many-tasks "$e" "$id"
}

# ---------------------------------------------------------------- main
ensure_cluster
stage_code
mkdir -p "$RESULTS"
[ $# -gt 0 ] && LIST=("$@") || LIST=("${ALL[@]}")
for scn in "${LIST[@]}"; do
  fn="sc_${scn//-/_}"
  if ! declare -F "$fn" >/dev/null; then say "unknown scenario $scn"; continue; fi
  say "=== $scn"
  SECONDS=0
  "$fn"
  say "=== $scn took ${SECONDS}s"
done
