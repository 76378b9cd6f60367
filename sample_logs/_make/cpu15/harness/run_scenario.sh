#!/usr/bin/env bash
# Run one failure scenario of the seqcls Ray Train project in a fresh, neutrally named directory
# and copy every log it wrote to $RESULTS/cpu15-<scenario>/.
#   harness/run_scenario.sh <scenario>
set -uo pipefail
SC=${1:?scenario}
HERE=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-/tmp/cpu15-venv}
RESULTS=${RESULTS:-/tmp/cpu15-results}
OUT=$RESULTS/cpu15-$SC
rm -rf "$OUT"; mkdir -p "$OUT"

WORK=$(mktemp -d /tmp/job.XXXXXXXX)          # neutral name: nothing in it names the scenario
cp -r "$HERE/project/." "$WORK/"
cd "$WORK"
. "$VENV/bin/activate"
export RAY_TMPDIR=$WORK/tmp                  # keep each run's Ray session logs apart
mkdir -p "$RAY_TMPDIR"
python prepare_data.py > /dev/null

keep_session_logs() {   # copy Ray's own per-process logs (the second layout)
  local s; s=$(ls -d "$RAY_TMPDIR"/ray/session_2* 2>/dev/null | head -1)
  [ -n "$s" ] || return 0
  mkdir -p "$OUT/ray_logs"
  cp "$s"/logs/worker-*.out "$s"/logs/worker-*.err "$s"/logs/raylet.out "$s"/logs/gcs_server.out "$OUT/ray_logs/" 2>/dev/null
}

launch_tee() {   # the usual: python train.py ... 2>&1 | tee train.log
  timeout 600 python train.py "$@" 2>&1 | tee train.log
  cp train.log "$OUT/"
}

case "$SC" in
  shape-rank1)
    # shard 1 was re-exported with 96-step windows; the model is built for 64
    python prepare_data.py --only-shard 1 --seq-len 96 > /dev/null
    launch_tee --config configs/base.yaml
    ;;
  missing-shard-rank2)
    # the copy of shard 2 never reached this machine
    rm -f data/train/shard-00002.npz
    launch_tee --config configs/three_workers.yaml
    keep_session_logs
    ;;
  host-oom-rank1)
    # shard 1 was exported at 130x the size; the job runs in a 3 GiB memory cgroup (like a container limit)
    python prepare_data.py --only-shard 1 --windows-per-shard 200000 > /dev/null
    CG=/sys/fs/cgroup/memory/$(basename "$WORK")
    mkdir "$CG"
    echo $((3 * 1024 * 1024 * 1024)) > "$CG/memory.limit_in_bytes"
    echo $((3 * 1024 * 1024 * 1024)) > "$CG/memory.memsw.limit_in_bytes" 2>/dev/null
    ( echo $BASHPID > "$CG/cgroup.procs"; exec timeout 600 python train.py --config configs/base.yaml ) 2>&1 | tee train.log
    cp train.log "$OUT/"
    keep_session_logs
    cat "$CG/memory.max_usage_in_bytes" "$CG/memory.failcnt" > "$WORK/cg.txt" 2>/dev/null
    sleep 2; rmdir "$CG" 2>/dev/null || true
    ;;
  sigkill-rank1)
    # the worker process of rank 1 is killed with SIGKILL from outside while it trains
    # (stdout and stderr to separate files)
    timeout 600 python train.py --config configs/base.yaml --set train.epochs=6 > train.out 2> train.err &
    PID=$!
    victim=""
    for _ in $(seq 1 240); do
      victim=$(cat train.out train.err 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' \
               | grep -E 'RayTrainWorker pid=[0-9]+\).*rank=1 \| epoch 1 step' | head -1 | sed -E 's/.*pid=([0-9]+)\).*/\1/')
      [ -n "$victim" ] && break
      sleep 1
    done
    [ -n "$victim" ] && kill -9 "$victim"
    wait $PID
    cp train.out train.err "$OUT/"
    ;;
  scaling-config)
    # the config copied from the GPU cluster still asks for a GPU per worker; use_gpu was switched off
    SEQCLS_LOG_FILE=driver.log timeout 600 python train.py --config configs/base.yaml \
        --set 'trainer.resources_per_worker={CPU: 0.5, GPU: 1}' 2>&1 | tee train.log
    cp train.log driver.log "$OUT/"
    ;;
  import-metric)
    # macro-F1 needs torchmetrics, which is not installed in this environment
    launch_tee --config configs/base.yaml --set 'train.metrics=[accuracy, macro_f1]'
    ;;
  ckpt-resume-rank1)
    # an earlier run saved checkpoints; the last one's rank-1 optimizer file was cut short (quota hit while
    # writing). Resuming from it.
    timeout 600 python train.py --config configs/base.yaml --set train.epochs=2 > /dev/null 2>&1
    last=$(ls -d runs/imu-transformer/checkpoint_2* | sort | tail -1)
    f="$last/optim-rank01.pt"; sz=$(stat -c %s "$f"); truncate -s $((sz / 3)) "$f"
    SEQCLS_LOG_FILE=driver.log timeout 600 python train.py --config configs/base.yaml \
        --set train.epochs=5 --resume "$last" 2>&1 | tee train.log
    cp train.log driver.log "$OUT/"
    keep_session_logs
    ;;
  early-stop-hang)
    # the val export has a single window: rank 1 gets an empty slice, its val loss never improves, so its
    # local early stopping ends training while rank 0 goes on into the next epoch's gradient all-reduce
    python prepare_data.py --val-windows 1 > /dev/null
    launch_tee --config configs/base.yaml --set train.epochs=8 \
        --set 'train.early_stopping={patience: 2, min_delta: 0.0}'
    keep_session_logs
    ;;
  nan-rank1)
    # a sensor dropout was exported as NaN in shard 1
    python - <<'PY'
import numpy as np
z = dict(np.load("data/train/shard-00001.npz"))
z["x"][700:702, 20:34, 5] = np.nan
np.savez("data/train/shard-00001.npz", **z)
PY
    RAY_DEDUP_LOGS=0 launch_tee --config configs/base.yaml
    ;;
  raydata-schema)
    # one parquet part was written by an older exporter with activity names instead of class ids
    python - <<'PY'
import pyarrow as pa, pyarrow.parquet as pq, json
names = json.load(open("data/stats.json"))["classes"]
t = pq.read_table("data/parquet/part-00002.parquet")
t = t.set_column(1, "activity", pa.array([names[i] for i in t.column("activity").to_pylist()]))
pq.write_table(t, "data/parquet/part-00002.parquet")
PY
    launch_tee --config configs/ray_data.yaml
    keep_session_logs
    ;;
  raydata-transform)
    # one parquet part was re-exported with 96-step windows (same schema, longer signal lists)
    python - <<'PY'
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
rng = np.random.default_rng(7)
t = pq.read_table("data/parquet/part-00002.parquet")
n = t.num_rows
sig = rng.standard_normal((n, 96 * 16)).astype(np.float32)
pq.write_table(pa.table({"signal": list(sig), "activity": t.column("activity")}), "data/parquet/part-00002.parquet")
PY
    launch_tee --config configs/ray_data.yaml
    keep_session_logs
    ;;
  heads-divisibility)
    # model width bumped to 6 heads without changing d_model=128
    launch_tee --config configs/base.yaml --set model.n_heads=6
    ;;
  *) echo "unknown scenario $SC" >&2; exit 2 ;;
esac
cd /; rm -rf "$WORK"
echo "== $SC -> $OUT"; ls -R "$OUT" | head -40
