#!/bin/bash
# Submit each scenario to the local SLURM cluster, wait for it, and keep what it wrote.
#   RESULTS=/tmp/slurm8-results bash run_all.sh [scenario ...]
# Env: RESULTS (required), WORK (default /tmp/slurm8-work), VENV (default /work/main/.venv),
#      PARALLEL (default 2), GUARD (default 300 s per job).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${RESULTS:?set RESULTS}"
WORK=${WORK:-/tmp/slurm8-work}
export VENV=${VENV:-/work/main/.venv}
PARALLEL=${PARALLEL:-2}
GUARD=${GUARD:-300}
PY=$VENV/bin/python

if ! sinfo >/dev/null 2>&1; then
    bash "$HERE/../../../tests/slurm/local-slurm.sh" up
fi

# data set each scenario needs (the defect, if any, is in the data, never in a name the job sees)
data_args() {
    case $1 in
        posemb_longdoc) echo "--defect longdoc:2" ;;
        logits_oom) echo "--tgt-vocab 30000 --src-vocab 3000 --train 1200" ;;
        earlystop_hang) echo "--defect empty:2" ;;
        blob_segv) echo "--defect blob:3" ;;
        latin1_line) echo "--defect latin1:1" ;;
        bleu_short_valid) echo "--defect short:3" ;;
        *) echo "" ;;
    esac
}

run_one() {
    local sc=$1 dir id t0 state out
    dir=$WORK/run-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
    mkdir -p "$dir/logs"
    cp -r "$HERE/nmt" "$HERE/configs" "$HERE/train.py" "$HERE/launch.sh" "$dir/"
    cp "$HERE/sbatch/$sc.sbatch" "$dir/job.sbatch"
    # shellcheck disable=SC2046
    "$PY" "$HERE/make_data.py" "$dir/data" $(data_args "$sc") >/dev/null
    id=$(cd "$dir" && sbatch --parsable job.sbatch) || { echo "[$sc] sbatch failed"; return 1; }
    id=${id%%;*}
    echo "[$sc] job $id in $dir"
    t0=$SECONDS
    while :; do
        sleep 3
        if ((SECONDS - t0 > GUARD)); then
            echo "[$sc] guard: scancel $id after ${GUARD}s"
            scancel "$id"
            sleep 10
        fi
        [[ -n $(squeue -h -j "$id" -o %i 2>/dev/null) ]] && continue
        state=$(sacct -n -P -j "$id" -o State 2>/dev/null | grep -E 'RUNNING|PENDING|COMPLETING|REQUEUED' || true)
        [[ -z $state ]] && break
    done
    sleep 2
    out=$RESULTS/slurm8-$sc
    rm -rf "$out"
    mkdir -p "$out"
    (cd "$dir" && find . -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' \) ! -name '*.report.*' \
        ! -name '*.sacct.txt' -exec cp -p {} "$out/" \;)
    if [[ -n $(ls -A "$dir/logs") ]]; then
        (cd "$dir" && find logs -type f ! -name '*.report.json' ! -name '*.report.md' ! -name '*.sacct.txt' \
            -exec cp -p --parents {} "$out/" \;)
    fi
    sacct -j "$id" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList >"$out/sacct.txt"
    echo "[$sc] done after $((SECONDS - t0))s: $(sacct -X -n -P -j "$id" -o State,ExitCode | tr '\n' ' ')"
}

ALL=(posemb_longdoc logits_oom sacrebleu_late earlystop_hang blob_segv latin1_line weights_only_restore
     warmup_zero bleu_short_valid rdzv_id_random)
if (($#)); then SC=("$@"); else SC=("${ALL[@]}"); fi
mkdir -p "$RESULTS" "$WORK"
start=$SECONDS
running=0
for sc in "${SC[@]}"; do
    if ((running >= PARALLEL)); then
        wait -n
        running=$((running - 1))
    fi
    run_one "$sc" &
    running=$((running + 1))
done
wait
echo "all done in $((SECONDS - start))s"
