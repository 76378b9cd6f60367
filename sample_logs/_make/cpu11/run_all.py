#!/usr/bin/env python
"""Harness: runs the failure scenarios of cpu11 in fresh neutral work dirs and copies what each job wrote."""
from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.environ.get("RESULTS", "/tmp/cpu11-results")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/c11runs")
BASE_PORT = int(os.environ.get("BASE_PORT", "29600"))
TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "150"))
MAX_PAR = int(os.environ.get("MAX_PAR", "3"))
CFG = "-c configs/default.toml"
TR = "torchrun"

# ----------------------------------------------------------------------------- data defects
def mutate_nan_tail(job):
    import numpy as np
    p = os.path.join(job, "data/synthetic/train/images_0005.npy")
    x = np.load(p)
    x[40:] = np.float16("inf")
    np.save(p, x)


def mutate_resized_shard(job):
    import numpy as np
    d = os.path.join(job, "data/synthetic/train")
    x = np.load(os.path.join(d, "images_0007.npy")).astype(np.float32)
    big = np.repeat(np.repeat(x, 5, axis=2), 5, axis=3)[:, :, ::4, ::4]  # 16 -> 20
    np.save(os.path.join(d, "images_0007.npy"), big.astype(np.float16))


# ----------------------------------------------------------------------------- scenarios
# style: cmd is a bash command run in the job dir; "node" lists give several commands (one per node)
S = {}
S["host-oom-wide-model"] = dict(
    cmd="ulimit -v 3000000; python spawn_train.py --nprocs 2 --port {P} " + CFG +
        " --set model.width=1024 > train.log 2>&1")
S["in-chans-mismatch"] = dict(
    cmd=f"{TR} --nproc-per-node=4 --master-port={{P}} train.py {CFG} --set model.in_chans=1 2>&1 | tee train.log")
S["preview-torchvision-rank0"] = dict(
    cmd="python -m torch.distributed.run --nproc_per_node 3 --master_port {P} train.py " + CFG +
        " --set log.preview_grid=true > stdout.log 2> stderr.log")
S["node1-gloo-device-env"] = dict(nodes=[
    f"{TR} --nnodes=2 --nproc-per-node=2 --node-rank=0 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:{{P}} "
    f"--rdzv-id=job7 --local-addr=127.0.0.1 train.py {CFG} > node0.log 2>&1",
    f"sleep 3; GLOO_DEVICE_TRANSPORT=IBVERBS {TR} --nnodes=2 --nproc-per-node=2 --node-rank=1 --rdzv-backend=c10d "
    f"--rdzv-endpoint=127.0.0.1:{{P}} --rdzv-id=job7 --local-addr=127.0.0.2 train.py {CFG} > node1.log 2>&1"])
S["zero-consolidate-rank0-only"] = dict(
    cmd=f"{TR} --nproc-per-node=3 --master-port={{P}} --log-dir logs/torchrun --redirects 3 --tee 3 train.py {CFG} "
        "--set ckpt.save_optimizer=true --set train.epochs=1 > console.log 2>&1")
S["nan-shard-skip-desync"] = dict(
    mutate=mutate_nan_tail,
    cmd=f"{TR} --nproc-per-node=4 --master-port={{P}} train.py {CFG} 2>&1 | tee train.log")
S["sighup-logout"] = dict(
    hup_after=dict(file="train.log", pattern="epoch 1:", delay=6),
    cmd=f"exec {TR} --nproc-per-node=2 --master-port={{P}} train.py {CFG} --set train.epochs=200 > train.log 2>&1")
S["resized-shard-collate"] = dict(
    mutate=mutate_resized_shard,
    cmd=f"{TR} --nproc-per-node=4 --master-port={{P}} --log-dir logs/torchrun --redirects 3 --tee 3 train.py {CFG} "
        "> console.log 2>&1")
S["resume-ckpt-without-ema"] = dict(
    prep=f"{TR} --nproc-per-node=1 --master-port={{P2}} train.py {CFG} --set train.epochs=1 > ../prep.log 2>&1",
    cmd=f"{TR} --nproc-per-node=3 --master-port={{P}} train.py {CFG} --set train.epochs=3 "
        "--set ckpt.resume=checkpoints --set train.ema_decay=0.999 2>&1 | tee train.log")
S["mixup-alpha-zero"] = dict(
    cmd=f"{TR} --nproc-per-node=4 --master-port={{P}} train.py {CFG} --set aug.mixup_alpha=0 2>&1 | tee train.log")
S["csv-gradnorm-noclip"] = dict(
    cmd=f"{TR} --nproc-per-node=4 --master-port={{P}} train.py {CFG} --set optim.clip_grad=0 2>&1 | tee train.log")
S["debug-detail-ddp"] = dict(
    cmd=f"export TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO; python -m torch.distributed.run "
        f"--nproc-per-node=2 --master-port={{P}} train.py {CFG} > stdout.log 2> stderr.log")

ORDER = list(S)
SKIP_COPY_DIRS = {"visionzero", "data", "configs", "tools", "__pycache__", "tmp", "checkpoints"}
SKIP_COPY_FILES = {"train.py", "spawn_train.py"}


def kill_tagged(tag):
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"C11_TAG={tag}".encode() in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def run_scenario(i, name):
    spec = S[name]
    tag = secrets.token_hex(6)
    root = os.path.join(WORK_ROOT, secrets.token_hex(4))
    job = os.path.join(root, f"run-{secrets.token_hex(3)}")
    os.makedirs(job)
    for d in ("visionzero", "configs", "tools"):
        shutil.copytree(os.path.join(HERE, d), os.path.join(job, d), ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("train.py", "spawn_train.py"):
        shutil.copy(os.path.join(HERE, f), job)
    env = dict(os.environ, C11_TAG=tag, TMPDIR=os.path.join(job, "tmp"), PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1")
    os.makedirs(env["TMPDIR"])
    subprocess.run([sys.executable, "tools/make_data.py"], cwd=job, env=env, check=True, stdout=subprocess.DEVNULL)
    if spec.get("mutate"):
        spec["mutate"](job)
    port, port2 = BASE_PORT + 10 * i, BASE_PORT + 10 * i + 5
    t0 = time.time()
    rec = dict(scenario=name, work_dir=job, timed_out=False)
    if spec.get("prep"):
        subprocess.run(["bash", "-c", spec["prep"].format(P2=port2)], cwd=job, env=env, timeout=TIMEOUT)
        kill_tagged(tag)
    cmds = spec.get("nodes") or [spec["cmd"]]
    cmds = [c.format(P=port) for c in cmds]
    rec["command"] = cmds if len(cmds) > 1 else cmds[0]
    procs = [subprocess.Popen(["bash", "-c", c], cwd=job, env=env, start_new_session=True) for c in cmds]
    if spec.get("hup_after"):  # the terminal session ends once training is well under way
        h = spec["hup_after"]
        while time.time() < t0 + TIMEOUT - 20 and procs[0].poll() is None:
            try:
                if h["pattern"] in open(os.path.join(job, h["file"]), errors="replace").read():
                    break
            except FileNotFoundError:
                pass
            time.sleep(1)
        time.sleep(h["delay"])
        procs[0].send_signal(signal.SIGHUP)
    deadline = t0 + TIMEOUT
    codes = [None] * len(procs)
    while any(c is None for c in codes):
        for k, p in enumerate(procs):
            codes[k] = p.poll()
        if time.time() > deadline:
            rec["timed_out"] = True
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            time.sleep(5)
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            codes = [p.wait() for p in procs]
            break
        time.sleep(0.5)
    time.sleep(1)
    kill_tagged(tag)
    rec["exit_codes"] = codes
    rec["wall_s"] = round(time.time() - t0, 1)
    dest = os.path.join(RESULTS, f"cpu11-{name}")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(job, dest, ignore=lambda d, names: [n for n in names if
                    (d == job and (n in SKIP_COPY_DIRS or n in SKIP_COPY_FILES)) or n.endswith(".pt")])
    print(f"[harness] {name}: exit={codes} wall={rec['wall_s']}s timed_out={rec['timed_out']}", flush=True)
    with LOCK:
        with open(os.path.join(RESULTS, "_meta", "run_log.txt"), "a") as f:
            f.write(json.dumps(rec) + "\n")
    return rec


LOCK = threading.Lock()


def versions():
    import numpy
    import torch
    return "\n".join([f"python {platform.python_version()}", f"torch {torch.__version__}",
                      f"numpy {numpy.__version__}", f"gloo backend available: {torch.distributed.is_gloo_available()}",
                      f"host {platform.node()} {platform.platform()}", f"cpus {os.cpu_count()}",
                      f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]) + "\n"


def main():
    names = sys.argv[1:] or ORDER
    for n in names:
        if n not in S:
            sys.exit(f"unknown scenario {n}; known: {' '.join(ORDER)}")
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    with open(os.path.join(RESULTS, "_meta", "versions.txt"), "w") as f:
        f.write(versions())
    t0 = time.time()
    with ThreadPoolExecutor(MAX_PAR) as ex:
        recs = list(ex.map(lambda n: run_scenario(ORDER.index(n), n), names))
    runs_path = os.path.join(RESULTS, "_meta", "runs.json")
    old = {}
    if os.path.exists(runs_path):
        old = {r["scenario"]: r for r in json.load(open(runs_path))}
    old.update({r["scenario"]: r for r in recs})
    json.dump([old[k] for k in ORDER if k in old], open(runs_path, "w"), indent=1)
    print(f"[harness] batch wall time {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
