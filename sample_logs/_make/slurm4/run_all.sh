#!/bin/bash
# Submit the slurm4 failure scenarios to the local SLURM cluster, one after the other,
# and collect what each job wrote.
#
#   RESULTS=/tmp/slurm4-results bash run_all.sh [SCENARIO...]
#
# Env: RESULTS (required)  output root; each scenario lands in $RESULTS/slurm4-<scenario>/
#      WORK   (/tmp/slurm4-work)   per-scenario run directories (code copy, data, checkpoints)
#      VENV   (/work/main/.venv)   python environment with torch, activated by the batch scripts
#      GUARD_S (per scenario, default 360)  wall-clock guard: the job is scancel'ed past it
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
: "${RESULTS:?set RESULTS=/dir}"
WORK=${WORK:-/tmp/slurm4-work}
export VENV=${VENV:-$REPO/.venv}
PY=$VENV/bin/python

ALL=(
    torchrun_node_shard
    hydra_sweep_override
    scratch_relpath_config
    val_rank0_hang
    ckpt_nodecache_race
    dataserver_killed
    timelimit_in_val
    guard_sigkill_rank
    ulimit_oom_longutt
    native_segv_worker
    srun_cpus_refused
    multistep_nmels_shape
)

# make_data.py arguments per scenario (data defects are what triggers most failures)
declare -A DATA=(
    [torchrun_node_shard]="--task image --classes 10 --train-shards 8 --per-shard 512 --val-shards 4 --val-per-shard 256 --truncate 3"
    [hydra_sweep_override]="--task speech"
    [scratch_relpath_config]="--task speech"
    [val_rank0_hang]="--task image --classes 10 --train-shards 8 --per-shard 512 --val-shards 4 --val-per-shard 10000"
    [ckpt_nodecache_race]="--task speech"
    [dataserver_killed]="--task speech --n-mels 80 --frames 400:800"
    [timelimit_in_val]="--task image --classes 10 --train-shards 4 --per-shard 1024 --val-shards 4 --val-per-shard 10000"
    [guard_sigkill_rank]="--task speech --long 1:0.6:10000 --long 5:0.6:10000"
    [ulimit_oom_longutt]="--task speech --long 2:0.05:60000 --long 6:0.05:60000"
    [native_segv_worker]="--task speech --empty 3:0.03 --empty 7:0.03"
    [srun_cpus_refused]="--task speech"
    [multistep_nmels_shape]="--task speech --n-mels 80 --nmels 1:64 --nmels 5:64"
)
declare -A GUARD=(
    [timelimit_in_val]=420
    [val_rank0_hang]=420
)

log() { echo "[run_all $(date '+%T')] $*"; }

ensure_cluster() {
    if ! sinfo -h >/dev/null 2>&1; then
        log "bringing the local cluster up"
        bash "$REPO/tests/slurm/local-slurm.sh" up
    fi
    for _ in $(seq 60); do
        sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && return 0
        sleep 2
    done
    log "cluster not ready"; sinfo; return 1
}

prepare() {
    local s=$1 run=$WORK/$1
    rm -rf "$run"
    mkdir -p "$run/logs"
    cp -r "$HERE"/train.py "$HERE"/data_server.py "$HERE"/check_data.py "$HERE"/mem_guard.sh \
        "$HERE"/kws "$HERE"/configs "$run"/
    rm -rf "$run"/kws/__pycache__ "$run"/kws/native/libspecops.so
    cp "$HERE/sbatch/$s.sbatch" "$run/job.sbatch"
    # shellcheck disable=SC2086
    "$PY" "$HERE/make_data.py" --out "$run/data" ${DATA[$s]} >"$run/.make_data.log" 2>&1
}

job_done() {  # true once the job and all its steps are finished in the accounting
    local jid=$1 st
    st=$(squeue -h -j "$jid" -o %T 2>/dev/null)
    case "$st" in PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|RESIZING) return 1 ;; esac
    st=$(sacct -n -X -j "$jid" -o State -P 2>/dev/null | head -n1)
    case "$st" in ""|PENDING|RUNNING|REQUEUED) return 1 ;; esac
    return 0
}

collect() {
    local s=$1 jid=$2 run=$WORK/$1 out=$RESULTS/slurm4-$1
    rm -rf "$out"
    mkdir -p "$out"
    # what the job wrote: top-level .out/.err and everything under logs/.  The test cluster's
    # EpilogSlurmctld hook drops <output>.report.{json,md} and <output>.sacct.txt next to each
    # job's output file; those are not the job's own output and are left out.
    (cd "$run" && find . -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' \) -print0 |
        xargs -0 -r cp -p -t "$out"/)
    if [ -d "$run/logs" ]; then
        (cd "$run" && find logs -type f ! -name '*.report.json' ! -name '*.report.md' ! -name '*.sacct.txt' -print0 |
            xargs -0 -r cp -p --parents -t "$out"/)
    fi
    sacct -j "$jid" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList >"$out/sacct.txt" 2>&1
}

run_one() {
    local s=$1 run=$WORK/$1 jid t0 guard=${GUARD[$1]:-360}
    if [ ! -f "$HERE/sbatch/$s.sbatch" ]; then log "unknown scenario $s"; return 1; fi
    log "== $s: preparing"
    prepare "$s" || { log "$s: data preparation failed"; cat "$run/.make_data.log"; return 1; }
    jid=$(cd "$run" && sbatch --parsable job.sbatch) || { log "$s: sbatch failed"; return 1; }
    jid=${jid%%;*}
    log "$s: submitted job $jid"
    t0=$(date +%s)
    while ! job_done "$jid"; do
        if (( $(date +%s) - t0 > guard )); then
            log "$s: wall-clock guard ($guard s) hit, cancelling job $jid"
            scancel "$jid"
            sleep 10
        fi
        sleep 3
    done
    sleep 2
    log "$s: job $jid finished after $(( $(date +%s) - t0 )) s: $(sacct -n -X -j "$jid" -o State,ExitCode -P)"
    collect "$s" "$jid"
    rm -rf "/tmp/slurm4-scratch/$jid"
}

main() {
    mkdir -p "$RESULTS" "$WORK"
    ensure_cluster || exit 1
    local list=("$@")
    [ ${#list[@]} -eq 0 ] && list=("${ALL[@]}")
    for s in "${list[@]}"; do
        run_one "$s"
    done
    log "results in $RESULTS"
}

main "$@"
