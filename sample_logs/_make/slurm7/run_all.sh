#!/bin/bash
# Submit the scenarios to the local SLURM cluster and collect what each job wrote.
#   RESULTS=/tmp/slurm7-results bash run_all.sh [scenario ...]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/slurm7-results}
WORK=${WORK:-/tmp/slurm7-work}
PARALLEL=${PARALLEL:-2}
PY=${SAGE_PYTHON:-/work/main/.venv/bin/python}
ALL="fanout_full_oom label_onebased halo_hang wide_feature_ddp scatter_import config_trailing_comma
     eval_step_timelimit ckpt_numpy_best metrics_tensor_rank0 stage_store_timeout"

data_flags() {
    case $1 in
        fanout_full_oom) echo "--dense-part 1 --dense-degree 3000" ;;
        label_onebased) echo "--label-shift-part 2" ;;
        halo_hang) echo "--no-halo-part 2" ;;
        stage_store_timeout) echo "--manifest --stale-manifest-part 3" ;;
        wide_feature_ddp) echo "--wide-part 3" ;;
        *) echo "" ;;
    esac
}
guard_s() { case $1 in eval_step_timelimit) echo 420 ;; *) echo 300 ;; esac; }

run_one() {
    local s=$1 d ids id id2 out deadline
    d=$WORK/run-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    mkdir -p "$d/logs"
    cp -r "$HERE/sage" "$HERE/train.py" "$HERE/evaluate.py" "$HERE/launch.sh" "$d/"
    cp "$HERE/configs/$s.json" "$d/config.json"
    cp "$HERE/sbatch/$s.sbatch" "$d/job.sbatch"
    # shellcheck disable=SC2046
    "$PY" "$HERE/make_graph.py" --out "$d/data" $(data_flags "$s") >/dev/null
    id=$(cd "$d" && sbatch --parsable job.sbatch) || { echo "[$s] sbatch failed"; return 1; }
    ids=$id
    if [[ -f $HERE/sbatch/$s.after.sbatch ]]; then
        cp "$HERE/sbatch/$s.after.sbatch" "$d/job2.sbatch"
        id2=$(cd "$d" && sbatch --parsable --dependency=afterok:"$id" job2.sbatch)
        ids="$id,$id2"
    fi
    echo "[$(date +%T)] $s: job(s) $ids in $d"
    deadline=$((SECONDS + $(guard_s "$s")))
    while [[ -n $(squeue -h -j "$ids" -o %i 2>/dev/null) ]]; do
        if ((SECONDS > deadline)); then
            echo "[$(date +%T)] $s: wall-clock guard, scancel $ids"
            scancel ${ids//,/ }
            sleep 10
            break
        fi
        sleep 3
    done
    sleep 4
    out=$RESULTS/slurm7-$s
    rm -rf "$out"
    mkdir -p "$out"
    (cd "$d" && find . \( -name '*.out' -o -name '*.err' -o -path './logs/*' \) -type f \
        ! -name '*.report.json' ! -name '*.report.md' ! -name '*.sacct.txt' -print0 |
        xargs -0 -r cp --parents -t "$out")
    sacct -j "$ids" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList >"$out/sacct.txt"
    echo "[$(date +%T)] $s: done -> $out ($(grep -v '^JobID' "$out/sacct.txt" | head -1 | cut -d'|' -f3,4))"
}

if [[ ${1:-} == --one ]]; then run_one "$2"; exit; fi
sinfo >/dev/null 2>&1 || bash "$HERE/../../../tests/slurm/local-slurm.sh" up
mkdir -p "$RESULTS" "$WORK"
list=${*:-$ALL}
start=$SECONDS
printf '%s\n' $list | xargs -P "$PARALLEL" -I{} bash "$0" --one {}
echo "batch wall time: $((SECONDS - start)) s"
