#!/usr/bin/env bash
# Run the slurm3 failure scenarios on the local SLURM cluster and collect their logs.
#
#   RESULTS=/dir bash run_all.sh [SCENARIO...]      (no SCENARIO: all of them)
#
# Env: WORK (scratch run dirs, default /tmp/slurm3-work), VENV (default /work/main/.venv),
#      JOB_GUARD (per-job wall-clock limit in s, default 240).
# Output: $RESULTS/slurm3-<scenario>/ = every file the job(s) wrote under out/ (unchanged) + sacct.txt
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
RESULTS=${RESULTS:?usage: RESULTS=/dir bash run_all.sh [SCENARIO...]}
WORK=${WORK:-/tmp/slurm3-work}
VENV=${VENV:-$REPO/.venv}
JOB_GUARD=${JOB_GUARD:-240}
PY="$VENV/bin/python"

ALL=(wrapper_killbad wrapper_nokill worldsize_mismatch array_config dep_missing_shard requeue_halfckpt
     early_return ckpt_permission dataloader_worker nan_rank timelimit_save usr1_requeue_fail)

say() { echo "[run_all $(date +%T)] $*"; }

ensure_cluster() {
    if scontrol ping 2>/dev/null | grep -q UP && sinfo -h -n vm -o %T 2>/dev/null | grep -qE 'idle|mix|alloc'; then
        return 0
    fi
    say "bringing the local cluster up"
    bash "$REPO/tests/slurm/local-slurm.sh" up
}

# fresh project checkout for one scenario
prepare() {
    local s=$1
    RUN=$WORK/$s
    if [ -d "$RUN" ]; then chmod -R u+w "$RUN" 2>/dev/null; rm -rf "$RUN"; fi
    mkdir -p "$RUN/out"
    cp -r "$HERE/train.py" "$HERE/prep.py" "$HERE/launch" "$HERE/jobs" "$HERE/configs" "$RUN/"
    ln -s "$VENV" "$RUN/.venv"
}

mkdata() { (cd "$RUN" && "$PY" "$HERE/make_data.py" "$@"); }

submit() { (cd "$RUN" && sbatch --parsable "$@") | cut -d';' -f1; }

# wait until none of the given job ids is in the queue any more (guarded)
wait_jobs() {
    local ids=$1 t0=$SECONDS
    while [ -n "$(squeue -h -j "$ids" -o %i 2>/dev/null)" ]; do
        if (( SECONDS - t0 > JOB_GUARD )); then
            say "GUARD: $ids still queued/running after ${JOB_GUARD}s, cancelling"
            scancel "$ids"; sleep 8; break
        fi
        sleep 2
    done
    # let accounting catch up
    for _ in $(seq 15); do
        sacct -j "$ids" -n -P -o State 2>/dev/null | grep -qE 'RUNNING|PENDING|COMPLETING|REQUEUED' || break
        sleep 2
    done
}

collect() {
    local s=$1 ids=$2 dest=$RESULTS/slurm3-$1
    rm -rf "$dest"; mkdir -p "$dest"
    cp -a "$RUN/out/." "$dest/"
    sacct -j "$ids" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList > "$dest/sacct.txt"
    say "$s: jobs $ids ->"; sed 's/^/      /' "$dest/sacct.txt"
}

# ---------------------------------------------------------------- scenario bodies: set IDS
sc_wrapper_killbad()    { mkdata shards data/shards --ranks 4 --truncate 2; IDS=$(submit jobs/train_wrapped.sbatch); }
sc_wrapper_nokill()     { mkdata shards data/shards --ranks 4 --truncate 1; IDS=$(submit jobs/train_wrapped_nokill.sbatch); }
sc_worldsize_mismatch() { mkdata shards data/shards --ranks 4; IDS=$(submit jobs/train_ws.sbatch); }
sc_array_config()       { mkdata shards data/shards --ranks 2; IDS=$(submit jobs/sweep_array.sbatch); }
sc_dep_missing_shard()  {
    mkdata raw data/raw --parts 4 --unlabelled 2
    IDS=$(cd "$RUN" && bash jobs/submit_pipeline.sh | tr ' ' ',')
}
sc_requeue_halfckpt()   {
    mkdata shards data/shards --ranks 2 --samples 256
    IDS=$(submit jobs/train_requeue.sbatch)
    local log=$RUN/out/train_$IDS.log ck=$RUN/runs/large/ckpt/last.pt t0=$SECONDS done=0
    # requeue while rank 0 is in the middle of writing last.pt
    while (( SECONDS - t0 < JOB_GUARD )); do
        if [ -f "$log" ]; then
            local saving saved
            saving=$(grep -c 'saving checkpoint to' "$log"); saved=$(grep -c 'checkpoint saved' "$log")
            if (( saving > saved )) && [ -s "$ck" ]; then
                scontrol requeue "$IDS" && done=1
                say "requeued $IDS while saving (last.pt had $(stat -c %s "$ck") bytes)"
                break
            fi
        fi
        sleep 0.1
    done
    (( done )) || { say "never caught a save in progress"; return; }
    # skip the requeue BeginTime delay
    for _ in $(seq 120); do
        if [ "$(squeue -h -j "$IDS" -o %T)" = PENDING ]; then
            sleep 1; scontrol update JobId="$IDS" StartTime=now && break
        fi
        sleep 0.5
    done
    "$PY" - "$ck" <<'EOF'
import sys, zipfile
try:
    zipfile.ZipFile(sys.argv[1]); print("[run_all] last.pt left by attempt 1: complete (scenario will NOT fail)")
except Exception as e:
    print(f"[run_all] last.pt left by attempt 1: truncated ({e})")
EOF
}
sc_early_return()       { mkdata shards data/finetune --ranks 5 --small 4:10; IDS=$(submit jobs/train_early.sbatch); }
sc_ckpt_permission()    {
    mkdata shards data/shards --ranks 6
    mkdir -p "$RUN/ckpt/rank_05"; chmod 555 "$RUN/ckpt/rank_05"   # left read-only by an earlier run
    IDS=$(submit jobs/train_sharded.sbatch)
}
sc_dataloader_worker()  { mkdata files data/samples --samples 400 --empty 3:4; IDS=$(submit jobs/train_files.sbatch); }
sc_nan_rank()           { mkdata shards data/shards --ranks 4 --inf 0; IDS=$(submit jobs/train_plain.sbatch); }
sc_timelimit_save()     { mkdata shards data/shards --ranks 2 --samples 256; IDS=$(submit jobs/train_timelimit.sbatch); }
sc_usr1_requeue_fail()  {
    mkdata shards data/shards --ranks 3
    IDS=$(submit jobs/train_preempt.sbatch)
    local log=$RUN/out/preempt_$IDS.out t0=$SECONDS
    while (( SECONDS - t0 < JOB_GUARD )); do
        if [ -f "$log" ] && grep -q ' step 20 loss' "$log"; then
            scancel --signal=USR1 "$IDS"; say "sent SIGUSR1 to the steps of $IDS"; break
        fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------- main
main() {
    local scen=("$@") s t_all=$SECONDS
    [ ${#scen[@]} -eq 0 ] && scen=("${ALL[@]}")
    for s in "${scen[@]}"; do
        declare -F "sc_$s" >/dev/null || { echo "unknown scenario: $s (known: ${ALL[*]})" >&2; exit 2; }
    done
    ensure_cluster || exit 1
    mkdir -p "$RESULTS" "$WORK"
    for s in "${scen[@]}"; do
        local t0=$SECONDS
        say "=== $s"
        prepare "$s"
        IDS=""
        "sc_$s"
        if [ -z "$IDS" ]; then say "$s: submission failed"; continue; fi
        wait_jobs "$IDS"
        collect "$s" "$IDS"
        say "$s took $((SECONDS - t0))s"
    done
    say "all done in $((SECONDS - t_all))s -> $RESULTS"
}

main "$@"
