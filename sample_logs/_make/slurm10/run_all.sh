#!/bin/bash
# Submit every scenario (or the ones named) as real SLURM jobs on the local cluster and keep their logs.
#   RESULTS=/tmp/slurm10-results WORK=/tmp/slurm10-work ./run_all.sh [scenario...]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/slurm10-results}
WORK=${WORK:-/tmp/slurm10-work}
PY=${PY:-/work/main/.venv/bin/python}
GUARD_S=${GUARD_S:-300}          # scancel our own job(s) of a scenario after this long
MAX_PAR=${MAX_PAR:-2}            # 2 real cores: at most 2 jobs at a time

bash /work/main/tests/slurm/local-slurm.sh status >/dev/null 2>&1 || bash /work/main/tests/slurm/local-slurm.sh up
mkdir -p "$RESULTS/_meta" "$WORK"

if [ $# -gt 0 ]; then SCEN=("$@"); else SCEN=($(cd "$HERE/scenarios" && ls -d */ | tr -d /)); fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname) $(uname -srm) cores=$(nproc)"
  echo "slurm: $(sinfo -V)"
  echo "python: $($PY -c 'import sys; print(sys.version.split()[0])')"
  echo "torch: $($PY -c 'import torch; print(torch.__version__)')"
  echo "numpy: $($PY -c 'import numpy; print(numpy.__version__)')"
  echo "zstd: $(zstd --version 2>&1 | head -1)"
  echo "node: $(scontrol show node "$(hostname -s)" | grep -o 'CPUTot=[0-9]*\|RealMemory=[0-9]*' | tr '\n' ' ')"
} > "$RESULTS/_meta/versions.txt"

run_one() {
  local s=$1 sd="$HERE/scenarios/$1"
  local rd="$WORK/run-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  local out="$RESULTS/slurm10-$s" meta="$RESULTS/_meta/$s.json"
  rm -rf "$out"; mkdir -p "$rd/src" "$rd/logs" "$out"
  cp -r "$HERE/project/mae" "$rd/src/"
  cp "$sd/job.sbatch" "$sd/config.json" "$rd/"
  (cd "$rd" && PYTHONPATH=src "$PY" -m mae.data --out data $(cat "$sd/prep.args") >/dev/null)
  [ -f "$sd/setup.sh" ] && (cd "$rd" && bash "$sd/setup.sh")
  local ids
  if [ -f "$sd/submit.sh" ]; then ids=$(cd "$rd" && bash "$sd/submit.sh"); else ids=$(cd "$rd" && sbatch --parsable job.sbatch); fi
  local csv=$(echo $ids | tr ' ' ',') t0=$(date +%s) guarded=false
  echo "[$(date +%T)] $s: jobs $csv in $rd"
  while [ -n "$(squeue -h -j "$csv" 2>/dev/null)" ]; do
    if [ $(( $(date +%s) - t0 )) -gt "$GUARD_S" ] && ! $guarded; then
      echo "[$(date +%T)] $s: guard hit, scancel $ids"; scancel $ids; guarded=true
    fi
    sleep 2
  done
  sleep 2
  sacct -j "$csv" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList > "$out/sacct.txt"
  cp -a "$rd/logs/." "$out/"
  local states=$(sacct -X -n -P -j "$csv" -o JobID,State | tr '\n' ' ')
  echo "[$(date +%T)] $s: done after $(( $(date +%s) - t0 ))s: $states"
  printf '{"scenario": "%s", "run_dir": "%s", "job_ids": [%s], "submitted": %d, "finished": %d, "guard_cancelled": %s, "states": "%s"}\n' \
    "$s" "$rd" "$csv" "$t0" "$(date +%s)" "$guarded" "${states% }" > "$meta"
}

running=0
for s in "${SCEN[@]}"; do
  [ -d "$HERE/scenarios/$s" ] || { echo "no scenario $s" >&2; continue; }
  run_one "$s" &
  running=$((running + 1))
  if [ $running -ge $MAX_PAR ]; then wait -n; running=$((running - 1)); fi
done
wait
# runs.json: merge of the per-scenario records of every scenario that has one
"$PY" - "$RESULTS/_meta" <<'PYEOF'
import json, os, sys
d = sys.argv[1]
runs = {}
for f in sorted(os.listdir(d)):
    if f.endswith(".json") and f != "runs.json":
        with open(os.path.join(d, f)) as fh:
            r = json.load(fh)
        runs[r["scenario"]] = r
with open(os.path.join(d, "runs.json"), "w") as fh:
    json.dump(runs, fh, indent=1)
print(f"runs.json: {len(runs)} scenarios")
PYEOF
