#!/bin/bash
# run_all.sh [scenario ...]: submit each scenario's batch script to the local SLURM cluster, wait,
# and copy what the job wrote to $RESULTS/slurm6-<scenario>/ (plus sacct.txt).
#   RESULTS   where results go            (default /tmp/slurm6-results)
#   WORK      where run directories live  (default /tmp/slurm6-work)
#   PARALLEL  scenarios in flight at once (default 2)
#   GUARD_S   per-scenario wall-clock guard before scancel (default 300)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/slurm6-results}
WORK=${WORK:-/tmp/slurm6-work}
PARALLEL=${PARALLEL:-2}
GUARD_S=${GUARD_S:-300}
PY=${TSF_PYTHON:-/work/main/.venv/bin/python}

sinfo >/dev/null 2>&1 || bash /work/main/tests/slurm/local-slurm.sh up

# the two slow ones (a 60 s gloo timeout; a pretrain job plus its dependent) first, so the rest overlap them
ALL=(holdout_dst_spin resume_weights_only hardcoded_bs_view lagmat_oom gloo_ifname hier_pickle_segv
     leaderboard_gather lr_override_string na_token savgol_import srun_export_none station_id_concat)
if (($#)); then scenarios=("$@"); else scenarios=("${ALL[@]}"); fi

job_done() {  # job_done ID: no longer in squeue and sacct has a final state for it
    [[ -z $(squeue -h -j "$1" 2>/dev/null) ]] || return 1
    local st; st=$(sacct -n -X -P -j "$1" -o State 2>/dev/null | head -n1)
    [[ -n $st && $st != PENDING && $st != RUNNING && $st != COMPLETING ]]
}

wait_job() {  # wait_job ID DEADLINE
    while ! job_done "$1"; do
        if ((SECONDS > $2)); then echo "[run_all] guard: scancel $1" >&2; scancel "$1"; sleep 8; return; fi
        sleep 2
    done
}

run_one() {
    # a neutral run directory: no path in the logs names the scenario
    local s=$1 d=$WORK/job-$(printf %s "$1" | md5sum | cut -c1-8) out=$RESULTS/slurm6-$1 pre="" main ids=() mk
    rm -rf "$d" "$out"; mkdir -p "$d/logs" "$out"
    cp -r "$HERE"/{tsf,configs,train.py,launch.sh} "$d"/
    cp "$HERE/sbatch/$s.sbatch" "$d/job.sbatch"
    [[ -f $HERE/sbatch/$s.pre.sbatch ]] && cp "$HERE/sbatch/$s.pre.sbatch" "$d/pre.sbatch"
    mk=$(grep -h '^#MAKE_DATA' "$d/job.sbatch" "$d/pre.sbatch" 2>/dev/null | head -n1 | cut -d' ' -f2-)
    (cd "$d" && "$PY" "$HERE/make_data.py" --out data $mk) >/dev/null || { echo "[run_all] $s: make_data failed"; return; }
    local start=$SECONDS
    if [[ -f $d/pre.sbatch ]]; then
        pre=$(cd "$d" && sbatch --parsable pre.sbatch) || return
        ids+=("$pre")
        main=$(cd "$d" && sbatch --parsable --dependency=afterok:"$pre" job.sbatch) || return
    else
        main=$(cd "$d" && sbatch --parsable job.sbatch) || return
    fi
    ids+=("$main")
    echo "[run_all] $s: submitted ${ids[*]}"
    [[ -n $pre ]] && wait_job "$pre" $((start + GUARD_S))
    if [[ -n $pre ]]; then wait_job "$main" $((start + 2 * GUARD_S)); else wait_job "$main" $((start + GUARD_S)); fi
    sleep 3   # let the epilog hooks and slurmdbd settle
    # what the job wrote: top-level *.out/*.err and logs/, minus the cluster's epilog report files
    (cd "$d" && find . -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' \) ; find logs -type f) \
        | grep -vE '\.report\.(json|md)$|\.sacct\.txt$' | while read -r f; do
            mkdir -p "$out/$(dirname "$f")"; cp -p "$d/$f" "$out/$f"; done
    for id in "${ids[@]}"; do sacct -j "$id" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList; done \
        | awk 'NR==1 || !/^JobID/' > "$out/sacct.txt"
    echo "[run_all] $s: done in $((SECONDS - start)) s: $(sacct -n -X -P -j "$main" -o State,ExitCode | head -n1)"
}

t0=$SECONDS
for s in "${scenarios[@]}"; do
    while (($(jobs -rp | wc -l) >= PARALLEL)); do wait -n; done
    run_one "$s" &
    sleep 1
done
wait
echo "[run_all] all done in $((SECONDS - t0)) s"
