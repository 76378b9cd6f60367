#!/bin/bash
# Submit every scenario (or those named) to the local SLURM cluster, wait, and collect the logs.
#   RESULTS=/tmp/slurm9-results bash run_all.sh [scenario ...]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/slurm9-results}
WORK=${WORK:-/tmp/slurm9-work}
PARALLEL=${PARALLEL:-2}
GUARD=${GUARD:-330}
export SEG_PYTHON=${SEG_PYTHON:-/work/main/.venv/bin/python}

if ! sinfo -h >/dev/null 2>&1; then
    bash "$HERE/../../../tests/slurm/local-slurm.sh" up
fi
mkdir -p "$RESULTS" "$WORK"

if [ $# -gt 0 ]; then scen=("$@"); else scen=($(cd "$HERE/scenarios" && ls)); fi

run_one() {
    local s=$1 src=$HERE/scenarios/$1 d ids="" dep="" pre id t0 out
    d=$WORK/run-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    mkdir -p "$d/configs" "$d/logs"
    cp -r "$HERE/segtrain" "$HERE/tools" "$HERE/train.py" "$d/"
    cp "$HERE/configs/base.json" "$d/configs/"
    cp "$src/config.json" "$d/configs/run.json"
    cp "$src/job.sbatch" "$d/job.sbatch"
    (cd "$d" && "$SEG_PYTHON" tools/make_data.py $(cat "$src/data.args")) >/dev/null
    cd "$d" || return
    if [ -f "$src/pre.sbatch" ]; then
        cp "$src/pre.sbatch" "$d/pre.sbatch"
        pre=$(sbatch --parsable pre.sbatch)
        ids=$pre
        dep="--dependency=afterok:$pre"
    fi
    id=$(sbatch --parsable $dep job.sbatch)
    ids=$(echo $ids $id | tr ' ' ',')
    echo "[$(date +%T)] $s: job(s) $ids in $d"
    t0=$SECONDS
    while [ -n "$(squeue -h -j "$ids" 2>/dev/null)" ]; do
        if (( SECONDS - t0 > GUARD )); then
            echo "[$(date +%T)] $s: guard ${GUARD}s reached, scancel $ids"
            scancel ${ids//,/ }
        fi
        sleep 3
    done
    # let accounting settle
    for _ in $(seq 20); do
        sacct -j "$ids" -n -P -o State | grep -qE 'RUNNING|PENDING|COMPLETING' || break
        sleep 1
    done
    sleep 2
    out=$RESULTS/slurm9-$s
    rm -rf "$out"; mkdir -p "$out"
    find . -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' -o -name '*.log' \) \
        ! -name '*.report.*' ! -name '*.sacct.txt' -exec cp -p {} "$out/" \;
    if [ -n "$(ls -A logs 2>/dev/null)" ]; then
        mkdir -p "$out/logs"
        (cd logs && find . -type f ! -name '*.report.json' ! -name '*.report.md' ! -name '*.sacct.txt' \
            -exec cp -p --parents {} "$out/logs/" \; )
    fi
    sacct -j "$ids" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList > "$out/sacct.txt"
    echo "[$(date +%T)] $s: done ($((SECONDS - t0))s): $(sacct -j "$ids" -X -n -P -o State | tr '\n' ' ')"
}

start=$SECONDS
running=0
for s in "${scen[@]}"; do
    run_one "$s" &
    running=$((running + 1))
    if (( running >= PARALLEL )); then wait -n; running=$((running - 1)); fi
done
wait
echo "all done in $((SECONDS - start))s"
