#!/bin/bash
# Submit each scenario as a real SLURM job (2 at a time), wait, copy every log unchanged to $RESULTS/slurm11-<name>/
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/slurm11-results}
WORK=${WORK:-/tmp/slurm11-work}
PY=/work/main/.venv/bin/python
GUARD_S=${GUARD_S:-300}
mkdir -p "$RESULTS/_meta" "$WORK"
bash /work/main/tests/slurm/local-slurm.sh status >/dev/null || bash /work/main/tests/slurm/local-slurm.sh up
python3 "$HERE/gen_scenarios.py" >/dev/null
if [ $# -gt 0 ]; then SCEN=("$@"); else SCEN=($(ls "$HERE/scenarios")); fi

{ echo "date: $(date -Is)"; uname -a; sbatch --version; $PY -c 'import torch,numpy,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"numpy",numpy.__version__)'; } > "$RESULTS/_meta/versions.txt" 2>&1

run_one() {
  local name=$1 sd="$HERE/scenarios/$1"
  local run; run=$(mktemp -d "$WORK/run-XXXXXXXX")
  python3 - "$HERE/configs/base.json" "$sd/overrides.json" "$run/config.json" <<'PYEOF'
import json, sys
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
    return a
json.dump(merge(json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))), open(sys.argv[3], "w"), indent=1)
PYEOF
  sed -e "s#@RUN@#$run#g" -e "s#@PROJ@#$HERE#g" "$sd/job.sbatch" > "$run/job.sbatch"
  local ids=() t0=$(date +%s)
  ids+=($(cd "$run" && sbatch --parsable job.sbatch))
  if [ -f "$sd/followup_args" ]; then
    ids+=($(cd "$run" && sbatch --parsable --dependency=afterok:${ids[0]} job.sbatch $(cat "$sd/followup_args")))
  fi
  local idl; idl=$(IFS=,; echo "${ids[*]}")
  echo "[$(date +%T)] $name: jobs $idl in $run"
  while [ -n "$(squeue -h -j "$idl" 2>/dev/null)" ]; do
    if [ $(( $(date +%s) - t0 )) -gt "$GUARD_S" ]; then
      echo "[$(date +%T)] $name: guard fired, scancel $idl"; scancel ${ids[*]}; sleep 8
    fi
    sleep 2
  done
  sleep 2
  local out="$RESULTS/slurm11-$name"; rm -rf "$out"; mkdir -p "$out"
  (cd "$run" && find . -type f \( -name '*.out' -o -name '*.err' -o -name '*.log' \) -exec cp -p --parents {} "$out/" \;)
  sacct -j "$idl" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList > "$out/sacct.txt"
  echo "{\"scenario\": \"$name\", \"jobs\": \"$idl\", \"run_dir\": \"$run\", \"wall_s\": $(( $(date +%s) - t0 ))}" > "$out/.run.json"
  echo "[$(date +%T)] $name: done ($(( $(date +%s) - t0 )) s) $(grep -v '^JobID' "$out/sacct.txt" | head -1)"
}

for s in "${SCEN[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  run_one "$s" &
  sleep 1
done
wait
python3 - "$RESULTS" <<'PYEOF'
import json, glob, os, sys
r = sys.argv[1]; p = os.path.join(r, "_meta", "runs.json")
old = {x["scenario"]: x for x in (json.load(open(p)) if os.path.exists(p) else [])}
for f in sorted(glob.glob(os.path.join(r, "slurm11-*", ".run.json"))):
    x = json.load(open(f)); old[x["scenario"]] = x; os.remove(f)
json.dump([old[k] for k in sorted(old)], open(p, "w"), indent=1)
PYEOF
echo "results in $RESULTS"
