#!/usr/bin/env python3
"""Run the failure scenarios of this project and collect every log the jobs wrote.

Each scenario gets a fresh, neutrally named job dir under $JOBS_ROOT (default /tmp/c12runs/<random>/),
a copy of the project, freshly generated data/tokenizer, the scenario's single defect, and a launch.sh.
launch.sh runs in its own process group and is killed (SIGTERM, then SIGKILL) after $JOB_TIMEOUT s.
Afterwards all log files (console logs, torchrun --log-dir trees, error files) are copied unchanged to
$RESULTS/cpu12-<scenario>/ ; model weights, optimizer states and data are not copied.

Usage: python3 harness.py [scenario ...]     (env: RESULTS, VENV, JOB_TIMEOUT, JOBS_ROOT, PARALLEL)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.environ.get("RESULTS", "/tmp/cpu12-results")
VENV = os.environ.get("VENV", "/tmp/cpu12-venv")
JOB_TIMEOUT = int(os.environ.get("JOB_TIMEOUT", "150"))
JOBS_ROOT = os.environ.get("JOBS_ROOT", "/tmp/c12runs")
PARALLEL = int(os.environ.get("PARALLEL", "2"))
PY = os.path.join(VENV, "bin", "python")

PROJECT_FILES = ["src", "configs", "train.py", "train_loop.py", "make_data.py"]
# what is copied back: logs only
LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".json")
SKIP_DIRS = {"data", "tokenizer", "src", "configs", "__pycache__"}
SKIP_FILES = {"launch.sh"}

ENV_HEADER = f"""#!/bin/bash
source {VENV}/bin/activate
export PYTHONPATH=src
export TOKENIZERS_PARALLELISM=false
set -o pipefail
"""

TRAINER_COMMON = (
    "--model_config configs/llama_tiny.yaml --tokenizer_dir tokenizer "
    "--use_cpu --ddp_backend gloo --ddp_timeout 30 --report_to none "
    "--per_device_train_batch_size 8 --per_device_eval_batch_size 8 --logging_steps 5 "
    "--dataloader_num_workers 0 --seed 42"
)


# ----------------------------------------------------------------------------------------------
# helpers used by scenario setups
# ----------------------------------------------------------------------------------------------
def sh(cmd, cwd):
    subprocess.run(["bash", "-c", f"source {VENV}/bin/activate && {cmd}"], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_project(d):
    os.makedirs(d, exist_ok=True)
    for f in PROJECT_FILES:
        src = os.path.join(HERE, f)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(d, f), ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, d)
    sh(f"{PY} make_data.py", d)


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


# ----------------------------------------------------------------------------------------------
# scenarios: setup(jobdir, port) -> launch.sh text
# ----------------------------------------------------------------------------------------------
def s_oom(d, port):
    """One scraped 'document' of ~12k words in the train set, truncation disabled, eager attention,
    per-process address-space limit (ulimit -v) as set by the site job template."""
    make_project(d)
    import random
    rng = random.Random(7)
    path = os.path.join(d, "data", "train.jsonl")
    lines = open(path).read().splitlines()
    txt = " ".join(json.loads(rng.choice(lines))["text"] for _ in range(330))
    lines.insert(523, json.dumps({"id": "t000523b", "text": txt}))
    write(path, "\n".join(lines) + "\n")
    return ENV_HEADER + f"""ulimit -v 5000000
torchrun --nproc-per-node 4 --master-port {port} train.py {TRAINER_COMMON} \\
  --train_file data/train.jsonl --validation_file data/valid.jsonl \\
  --max_seq_length 0 --attn_implementation eager \\
  --per_device_train_batch_size 4 --num_train_epochs 1 --eval_strategy no --save_strategy no \\
  --output_dir out 2>&1 | tee train.log
"""


def s_shape(d, port):
    """Latent collator bug (labels not padded to pad_to_multiple_of) triggered by --pad_to_multiple_of 8."""
    make_project(d)
    return ENV_HEADER + f"""accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
  --dynamo_backend no --main_process_port {port} \\
  train.py {TRAINER_COMMON} --train_file data/train.jsonl --validation_file data/valid.jsonl \\
  --max_seq_length 128 --pad_to_multiple_of 8 --max_steps 60 --eval_strategy steps --eval_steps 30 \\
  --save_strategy no --output_dir out > out.log 2>&1
"""


def s_import(d, port):
    """accelerate loop; config enables the end-of-run loss plot; matplotlib is not installed.
    Only the main process imports it (after training and save_state)."""
    make_project(d)
    write(os.path.join(d, "loop.yaml"), """model_config: configs/gpt2_tiny.yaml
train_glob: data/shards/*.jsonl
validation_file: data/valid.jsonl
cpu: true
batch_size: 8
max_steps: 40
eval_every: 20
log_every: 5
output_dir: out
report:
  plot: true
""")
    write(os.path.join(d, "accelerate_config.yaml"), f"""compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_machines: 1
num_processes: 3
machine_rank: 0
main_process_ip: 127.0.0.1
main_process_port: {port}
mixed_precision: 'no'
dynamo_config: {{}}
use_cpu: false
rdzv_backend: static
same_network: true
""")
    return ENV_HEADER + """accelerate launch --config_file accelerate_config.yaml train_loop.py --config loop.yaml 2>&1 | tee run.log
"""


def s_port(d, port):
    """Another (stale) process still listens on the master port."""
    make_project(d)
    return ENV_HEADER + f"""# a previous job's store is still holding the port
{PY} -c "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', {port})); s.listen(8); time.sleep(600)" &
SQUAT=$!
sleep 2
python -m torch.distributed.run --nproc-per-node 2 --nnodes 1 --master-addr 127.0.0.1 --master-port {port} \\
  train.py {TRAINER_COMMON} --train_file data/train.jsonl --max_steps 40 --eval_strategy no \\
  --save_strategy no --output_dir out > out.log 2> err.log
rc=$?
kill $SQUAT
exit $rc
"""


def s_rdzv(d, port):
    """Two 'nodes' (agents on 127.0.0.1 and 127.0.0.2), c10d rendezvous; node 1 was given a wrong
    rendezvous port (its launch line has a typo)."""
    for n in ("node0", "node1"):
        make_project(os.path.join(d, n))
    wrong = port + 10
    cmd = ("torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-id ft-7731 "
           "--rdzv-conf join_timeout=60 --max-restarts 0")
    args = f"train.py {TRAINER_COMMON} --train_file data/train.jsonl --max_steps 40 --eval_strategy no --save_strategy no --output_dir out"
    return ENV_HEADER + f"""(cd node0 && {cmd} --rdzv-endpoint 127.0.0.1:{port} --local-addr 127.0.0.1 {args} > train.log 2>&1) &
P0=$!
sleep 3
(cd node1 && {cmd} --rdzv-endpoint 127.0.0.1:{wrong} --local-addr 127.0.0.2 {args} > train.log 2>&1) &
P1=$!
wait $P0; r0=$?
wait $P1; r1=$?
echo "node0 rc=$r0 node1 rc=$r1" >&2
exit $(( r0 > r1 ? r0 : r1 ))
"""


def s_hang(d, port):
    """accelerate loop under torchrun; rank 2's shard file is a FIFO (stand-in for a dead network mount):
    open() blocks forever, the other ranks wait in the first gradient all-reduce until the 30 s timeout."""
    make_project(d)
    write(os.path.join(d, "loop.yaml"), """model_config: configs/gpt2_tiny.yaml
train_glob: data/shards/*.jsonl
validation_file: data/valid.jsonl
cpu: true
batch_size: 8
max_steps: 100
eval_every: 50
log_every: 5
pg_timeout: 30
output_dir: out
""")
    shard = os.path.join(d, "data", "shards", "part-00002.jsonl")
    os.remove(shard)
    os.mkfifo(shard)
    return ENV_HEADER + f"""torchrun --nproc-per-node 4 --master-port {port} --log-dir logs --redirects 3 --tee 3 \\
  train_loop.py --config loop.yaml > console.log 2>&1
"""


def s_killed(d, port):
    """Trainer run; ~4 s after training progress appears, rank 3 is SIGKILLed (as the kernel OOM killer
    would do on a memory-starved node). No traceback from rank 3."""
    make_project(d)
    return ENV_HEADER + f"""torchrun --nproc-per-node 4 --master-port {port} --log-dir logs --redirects 3 \\
  train.py {TRAINER_COMMON} --train_file data/train.jsonl --num_train_epochs 3 --eval_strategy epoch \\
  --save_strategy no --output_dir out > console.log 2>&1 &
TR=$!
# --- external event (not part of the job): the node's OOM killer picks one worker ---
(
  for i in $(seq 1 120); do
    if grep -qs "'loss'" logs/*/attempt_0/0/stdout.log logs/*/attempt_0/0/stderr.log; then break; fi
    sleep 1
  done
  sleep 4
  for p in $(pgrep -f "train.py --model_config" ); do
    if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=3"; then
      if [ "$(readlink /proc/$p/cwd)" = "$PWD" ]; then kill -9 $p; fi
    fi
  done
) &
wait $TR
"""


def s_data(d, port):
    """accelerate loop, 3 processes; shard part-00001 (read only by rank 1) has a truncated line in the
    middle (a copy interrupted and re-appended). Rank 1 fails mid-run with JSONDecodeError."""
    make_project(d)
    write(os.path.join(d, "loop.yaml"), """model_config: configs/gpt2_tiny.yaml
train_glob: data/shards/*.jsonl
validation_file: data/valid.jsonl
cpu: true
batch_size: 8
max_steps: 120
eval_every: 40
log_every: 5
output_dir: out
""")
    path = os.path.join(d, "data", "shards", "part-00001.jsonl")
    lines = open(path).read().splitlines()
    bad = lines[250]
    lines[250] = bad[: len(bad) // 2]
    write(path, "\n".join(lines) + "\n")
    return ENV_HEADER + f"""mkdir -p logs
accelerate launch --multi_gpu --num_processes 3 --num_machines 1 --mixed_precision no --dynamo_backend no \\
  --main_process_port {port} train_loop.py --config loop.yaml 2>&1 | tee logs/run.log
"""


def s_ckpt_local(d, port):
    """Two 'nodes' with node-local output dirs; resume from out/checkpoint-40, which exists only on node0."""
    for n in ("node0", "node1"):
        make_project(os.path.join(d, n))
    # earlier single-process run on node0 produced the checkpoint (its logs are not part of this job)
    sh(f"PYTHONPATH=src torchrun --nproc-per-node 1 --master-port {port + 20} train.py {TRAINER_COMMON} --train_file data/train.jsonl --max_steps 40 "
       "--save_steps 40 --eval_strategy no --output_dir out", os.path.join(d, "node0"))
    cmd = ("torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-id ft-2207 "
           f"--rdzv-endpoint 127.0.0.1:{port} --max-restarts 0")
    args = (f"train.py {TRAINER_COMMON} --train_file data/train.jsonl --max_steps 120 --save_steps 40 "
            "--eval_strategy steps --eval_steps 40 --output_dir out --resume_from_checkpoint out/checkpoint-40")
    return ENV_HEADER + f"""(cd node0 && {cmd} --local-addr 127.0.0.1 {args} 2>&1 | tee train.log) &
P0=$!
sleep 2
(cd node1 && {cmd} --local-addr 127.0.0.2 {args} 2>&1 | tee train.log) &
P1=$!
wait $P0; r0=$?
wait $P1; r1=$?
exit $(( r0 > r1 ? r0 : r1 ))
"""


def s_ckpt_fsize(d, port):
    """Job template sets a file-size limit (ulimit -f 1024 KiB); the first checkpoint's model.safetensors
    (~1.8 MB) cannot be written by rank 0."""
    make_project(d)
    return ENV_HEADER + f"""ulimit -f 1024
torchrun --nproc-per-node 2 --master-port {port} train.py {TRAINER_COMMON} \\
  --train_file data/train.jsonl --max_steps 80 --save_steps 20 --eval_strategy steps --eval_steps 20 \\
  --output_dir out 2>&1 | tee train.log
"""


def s_config(d, port):
    """JSON config: load_best_model_at_end with eval every 50 steps but saving once per epoch."""
    make_project(d)
    cfg = {
        "model_config": "configs/llama_tiny.yaml",
        "tokenizer_dir": "tokenizer",
        "train_file": "data/train.jsonl",
        "validation_file": "data/valid.jsonl",
        "max_seq_length": 128,
        "output_dir": "out",
        "use_cpu": True,
        "ddp_backend": "gloo",
        "ddp_timeout": 30,
        "report_to": "none",
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "learning_rate": 3e-4,
        "num_train_epochs": 2,
        "logging_steps": 10,
        "eval_strategy": "steps",
        "eval_steps": 50,
        "save_strategy": "epoch",
        "save_total_limit": 2,
        "load_best_model_at_end": True,
        "metric_for_best_model": "eval_loss",
        "seed": 42,
    }
    write(os.path.join(d, "run.json"), json.dumps(cfg, indent=2) + "\n")
    return ENV_HEADER + f"""python -m torch.distributed.run --nproc-per-node 3 --master-port {port} train.py run.json 2>&1 | tee train.log
"""


def s_code(d, port):
    """--log_throughput enables a callback whose counters are initialised only on world process zero;
    rank 1 raises AttributeError at its first optimizer step."""
    make_project(d)
    return ENV_HEADER + f"""torchrun --nproc-per-node 2 --master-port {port} --log-dir logs --redirects 3 --tee 3 \\
  train.py {TRAINER_COMMON} --train_file data/train.jsonl --max_steps 80 --eval_strategy steps \\
  --eval_steps 40 --save_strategy no --log_throughput True --output_dir out 2>&1 | tee console.log
"""


SCENARIOS = {
    "oom": (s_oom, 29701),
    "shape": (s_shape, 29702),
    "import": (s_import, 29703),
    "port": (s_port, 29704),
    "rdzv": (s_rdzv, 29705),
    "hang": (s_hang, 29706),
    "killed": (s_killed, 29707),
    "data": (s_data, 29708),
    "ckpt_local": (s_ckpt_local, 29709),
    "ckpt_fsize": (s_ckpt_fsize, 29710),
    "config": (s_config, 29711),
    "code": (s_code, 29712),
}


# ----------------------------------------------------------------------------------------------
def collect(jobdir, dest):
    n = 0
    for root, dirs, files in os.walk(jobdir):
        rel = os.path.relpath(root, jobdir)
        parts = [] if rel == "." else rel.split(os.sep)
        if any(p in SKIP_DIRS for p in parts):
            dirs[:] = []
            continue
        # inside output dirs keep only json/txt results, never weights
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("checkpoint-")
                   and not x.startswith("step-")]
        in_logdir = "logs" in parts
        for f in files:
            src = os.path.join(root, f)
            if f in SKIP_FILES or os.path.islink(src) or not os.path.isfile(src):
                continue
            if "out" in parts and not in_logdir:
                continue  # model output dir: skip (weights, tokenizer copies, metrics)
            if not (in_logdir or f.endswith(LOG_SUFFIXES)):
                continue
            if f.endswith(".json") and not (in_logdir or f.startswith("error")):
                continue  # run.json configs etc. are inputs, not logs
            dst = os.path.join(dest, rel, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
            n += 1
    return n


def run_one(name):
    setup, port = SCENARIOS[name]
    jobdir = os.path.join(JOBS_ROOT, uuid.uuid4().hex[:10])
    os.makedirs(jobdir)
    t_setup = time.time()
    script = setup(jobdir, port)
    write(os.path.join(jobdir, "launch.sh"), script, 0o755)
    t0 = time.time()
    p = subprocess.Popen(["bash", "launch.sh"], cwd=jobdir, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        _, err = p.communicate(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
    wall = time.time() - t0
    # make sure nothing of this job survives (workers in the same session)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    dest = os.path.join(RESULTS, f"cpu12-{name}")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    nfiles = collect(jobdir, dest)
    rec = {"scenario": name, "jobdir": jobdir, "exit_code": p.returncode, "timed_out": timed_out,
           "wall_s": round(wall, 1), "setup_s": round(t0 - t_setup, 1), "files": nfiles,
           "harness_stderr_tail": (err or b"").decode(errors="replace")[-500:]}
    print(json.dumps({k: rec[k] for k in ("scenario", "exit_code", "timed_out", "wall_s", "files")}), flush=True)
    return rec


def main():
    names = sys.argv[1:] or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            sys.exit(f"unknown scenario {n}; known: {' '.join(SCENARIOS)}")
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    os.makedirs(JOBS_ROOT, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(PARALLEL) as ex:
        recs = list(ex.map(run_one, names))
    runs_path = os.path.join(RESULTS, "_meta", "runs.json")
    old = {}
    if os.path.exists(runs_path):
        try:
            old = {r["scenario"]: r for r in json.load(open(runs_path))["runs"]}
        except Exception:
            old = {}
    for r in recs:
        old[r["scenario"]] = r
    json.dump({"last_batch_wall_s": round(time.time() - t0, 1), "job_timeout_s": JOB_TIMEOUT,
               "parallel": PARALLEL, "runs": [old[k] for k in SCENARIOS if k in old]},
              open(runs_path, "w"), indent=2)
    print(f"batch wall time {time.time() - t0:.1f}s; results in {RESULTS}")


if __name__ == "__main__":
    main()
