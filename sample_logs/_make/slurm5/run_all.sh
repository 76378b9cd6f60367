#!/bin/bash
# run_all.sh [SCENARIO...]: submit each scenario to the local SLURM cluster, wait, and copy what it wrote.
#   RESULTS  where results go ($RESULTS/slurm5-<scenario>/), default /tmp/slurm5-results
#   WORK     where the run directories are made, default /tmp/slurm5-work
#   GUARD_S  per-scenario wall-clock guard in seconds (scancel after), default 300
#   PARALLEL how many scenarios run at once, default 2 (the node advertises 8 CPUs, a scenario takes 4-5)
#   RETRIEVAL_PY  python interpreter for the jobs, default /work/main/.venv/bin/python
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RESULTS=${RESULTS:-/tmp/slurm5-results}
WORK=${WORK:-/tmp/slurm5-work}
GUARD_S=${GUARD_S:-300}
PARALLEL=${PARALLEL:-2}
export RETRIEVAL_PY=${RETRIEVAL_PY:-/work/main/.venv/bin/python}
PY=$RETRIEVAL_PY

ALL=(item_vocab_oob eval_step_port_clash free_port_per_task legacy_torch_six onecycle_pct negsample_hang
     eval_dense_oom ckpt_gpu_part ctypes_hash_segv ulimit_fsize_ckpt empty_eval_cat reprocess_shape login_cpu_rlimit)
if (($#)); then SCEN=("$@"); else SCEN=("${ALL[@]}"); fi

say() { printf '[run_all %(%T)T] %s\n' -1 "$*"; }

if ! sinfo -h >/dev/null 2>&1; then
    say "cluster not answering; starting it"
    bash /work/main/tests/slurm/local-slurm.sh up || exit 1
fi
mkdir -p "$RESULTS" "$WORK"

# index of a scenario in ALL, for a neutral run directory name
idx_of() { local i; for i in "${!ALL[@]}"; do [[ ${ALL[$i]} == "$1" ]] && { printf '%02d' "$i"; return; }; done; echo 99; }

# wait_jobs GUARD ID...: until no job is in squeue and sacct shows no step pending/running; scancel at GUARD s
wait_jobs() {
    local guard=$1 start=$SECONDS ids
    shift
    ids=$(IFS=,; echo "$*")
    while :; do
        if [[ -z $(squeue -h -j "$ids" 2>/dev/null) ]] &&
           ! sacct -n -P -j "$ids" -o State 2>/dev/null | grep -qE 'PENDING|RUNNING|REQUEUED|COMPLETING'; then
            return 0
        fi
        if ((SECONDS - start > guard)); then
            say "guard: ${guard}s passed, scancel $*"
            scancel "$@"
            guard=$((guard + 60))
        fi
        sleep 2
    done
}

run_one() {
    local s=$1 run args t0 out ids dest
    [[ -f $HERE/sbatch/$s.sbatch ]] || { say "no such scenario: $s"; return 1; }
    run=$WORK/exp$(idx_of "$s")
    rm -rf "$run"
    mkdir -p "$run/logs"
    cp -r "$HERE/retrieval" "$HERE/configs" "$HERE/train_retrieval.py" "$HERE/eval_watch.py" "$HERE/launch.sh" \
        "$HERE/make_data.py" "$run/"
    mkdir -p "$run/native" && cp "$HERE/native/fhash.c" "$HERE/native/Makefile" "$run/native/"
    find "$run" -name __pycache__ -prune -exec rm -rf {} +
    cp "$HERE/sbatch/$s.sbatch" "$run/job.sbatch"
    args=$(awk -v s="$s" '$1 == s { $1 = ""; print }' "$HERE/sbatch/data_args.txt")
    (cd "$run" && eval "\"$PY\" make_data.py --out data $args" >/dev/null) || { say "$s: make_data failed"; return 1; }
    if ! sinfo -h >/dev/null 2>&1; then
        say "cluster not answering; starting it"
        flock /tmp/slurm5-cluster-up.lock bash /work/main/tests/slurm/local-slurm.sh up || return 1
    fi
    t0=$SECONDS
    if [[ -f $HERE/sbatch/$s.submit.sh ]]; then
        cp "$HERE/sbatch/$s.submit.sh" "$run/submit.sh"
        out=$(cd "$run" && bash submit.sh 2>&1)
    else
        out=$(cd "$run" && sbatch job.sbatch 2>&1)
    fi
    ids=($(grep -oE 'Submitted batch job [0-9]+' <<<"$out" | awk '{print $4}'))
    if ((${#ids[@]} == 0)); then say "$s: submit failed: $out"; return 1; fi
    say "$s: jobs ${ids[*]} in $run"
    wait_jobs "$GUARD_S" "${ids[@]}"
    sleep 3   # let the epilog hooks and the filesystem settle
    dest=$RESULTS/slurm5-$s
    rm -rf "$dest"
    mkdir -p "$dest"
    (cd "$run" && find . -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' \) ! -name '*.report.*' ! -name '*.sacct.txt' \
        -exec cp -p {} "$dest/" \;)
    if [[ -n $(find "$run/logs" -type f ! -name '*.report.*' ! -name '*.sacct.txt' 2>/dev/null) ]]; then
        (cd "$run" && find logs -type f ! -name '*.report.*' ! -name '*.sacct.txt' -exec cp -p --parents {} "$dest/" \;)
    fi
    sacct -j "$(IFS=,; echo "${ids[*]}")" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList >"$dest/sacct.txt"
    say "$s: done in $((SECONDS - t0))s: $(awk -F'|' 'NR > 1 && $1 !~ /\./ {printf "%s=%s(%s) ", $1, $3, $4}' "$dest/sacct.txt")"
}

batch_start=$SECONDS
for s in "${SCEN[@]}"; do
    while (($(jobs -rp | wc -l) >= PARALLEL)); do wait -n; done
    run_one "$s" &
    sleep 5
done
wait
say "batch finished in $((SECONDS - batch_start))s"
