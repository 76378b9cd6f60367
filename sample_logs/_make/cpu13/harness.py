#!/usr/bin/env python
"""Run the training job in several configurations and keep every log it writes.

Usage: python harness.py [--results DIR] [--jobs 2] [scenario ...]
Each scenario gets a fresh, neutrally named work dir /tmp/c13runs/<random>/ ; the job is
started in its own process group and killed after TIMEOUT seconds.  Everything the job wrote
(minus data, checkpoints and the copied source) is copied to $RESULTS/cpu13-<scenario>/.
"""
import argparse
import concurrent.futures as cf
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("VENV", "/tmp/cpu13-venv")
RUNS = "/tmp/c13runs"
TIMEOUT = 150
PY = f"{VENV}/bin/python"
TORCHRUN = f"{VENV}/bin/torchrun"

SRC_ITEMS = ["train.py", "kws", "configs"]
BASE_PORT = 29610


def copy_src(dst):
    os.makedirs(dst, exist_ok=True)
    for it in SRC_ITEMS:
        s = os.path.join(HERE, it)
        (shutil.copytree if os.path.isdir(s) else shutil.copy2)(s, os.path.join(dst, it))


def make_data(dst, seed=0):
    subprocess.run([PY, os.path.join(HERE, "prepare_data.py"), "--out", dst, "--seed", str(seed)],
                   check=True, stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------- defects (data / files)
def long_recordings_shard(path, n=48, minutes=10, sr=8000):
    """A shard of unsegmented recordings: one keyword followed by minutes of near-silence."""
    rng = np.random.default_rng(7)
    length = sr * 60 * minutes
    wav = np.zeros((n, length), dtype=np.int16)
    lab = rng.integers(0, 12, n).astype(np.int16)
    t = np.arange(sr) / sr
    for i, c in enumerate(lab):
        wav[i, :sr] = (np.sin(2 * np.pi * (200 + 60 * c) * t) * 6000).astype(np.int16)
    np.savez_compressed(path, wav=wav, label=lab)


def truncate(path, keep=0.6):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * keep))


# ---------------------------------------------------------------- helpers while running
def find_worker(work, rank):
    """pid of the training process of this job (cmdline mentions the work dir) with RANK=<rank>."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{p}/cmdline", "rb").read()
        except (OSError, ProcessLookupError):
            continue
        if (f"RANK={rank}".encode() in env and work.encode() in cmd and b"train.py" in cmd
                and b"torchrun" not in cmd):
            return int(p)
    return None


def kill_rank_after_checkpoint(work, rank, ckpt_dir, meta):
    def watcher(proc):
        t0 = time.time()
        while proc.poll() is None and time.time() - t0 < 120:
            if os.path.isdir(ckpt_dir) and any(f.endswith(".ckpt") for f in os.listdir(ckpt_dir)):
                time.sleep(1.0)
                pid = find_worker(work, rank)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    meta["injected"] = f"SIGKILL to pid {pid} (RANK={rank}) at t={time.time() - t0:.1f}s"
                return
            time.sleep(0.5)
    return watcher


def port_blocker(port, meta):
    """Something else already listening on the port (it accepts, never answers)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(16)
    meta["blocker"] = f"listener on 0.0.0.0:{port}"
    return s


# ---------------------------------------------------------------- scenarios
CFG = "--config configs/base.yaml"
TR1 = f"{TORCHRUN} --nproc-per-node 2"


def scen(name, port, work):
    """Return (cmd, setup, watcher_factory, cleanup). cwd for cmd is work."""
    app = os.path.join(work, "kws-train")
    data = os.path.join(work, "data")
    watcher = None
    res = []
    env_common = f"export PATH={VENV}/bin:$PATH PYTHONUNBUFFERED=1; cd {app}; "
    if name == "bad_val_interval":
        copy_src(app); make_data(data)
        cmd = (f"{TR1} --master-port {port} train.py {CFG} data.data_dir={data} out_dir={work}/outputs "
               f"trainer.val_check_interval=50 2>&1 | tee {work}/train.log")
    elif name == "missing_torchaudio":
        copy_src(app); make_data(data)
        cmd = (f"{TR1} --master-port {port} --log-dir {work}/logs --redirects 3 --tee 3 train.py {CFG} "
               f"data.data_dir={data} out_dir={work}/outputs data.augment=speed_perturb > {work}/console.log 2>&1")
    elif name == "host_oom_rank1":
        copy_src(app); make_data(data)
        long_recordings_shard(os.path.join(data, "train", "shard-00001.npz"))
        cmd = (f"ulimit -v 5000000; {TR1} --master-port {port} --log-dir {work}/torchrun_logs train.py {CFG} "
               f"data.data_dir={data} out_dir={work}/outputs data.precompute_features=true "
               f"> {work}/out.log 2> {work}/err.log")
    elif name == "shape_sample_rate":
        copy_src(app); make_data(data)
        cmd = (f"MASTER_PORT={port} {PY} train.py {CFG} data.data_dir={data} out_dir={work}/outputs "
               f"model.sample_rate=16000 2>&1 | tee {work}/train.log")
    elif name == "master_port_busy":
        copy_src(app); make_data(data)
        cmd = (f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port} {PY} train.py {CFG} data.data_dir={data} "
               f"out_dir={work}/outputs > {work}/out.log 2> {work}/err.log")
        res.append(("blocker", port))
    elif name == "rdzv_wrong_endpoint":
        for n in (0, 1):
            copy_src(os.path.join(work, f"node{n}", "kws-train")); make_data(os.path.join(work, f"node{n}", "data"))
        common = (f"--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-id kws-{port} "
                  f"--rdzv-conf join_timeout=45,read_timeout=60")
        n0 = (f"cd {work}/node0/kws-train && {TORCHRUN} {common} --rdzv-endpoint 127.0.0.1:{port} "
              f"--local-addr 127.0.0.1 train.py {CFG} data.data_dir={work}/node0/data out_dir={work}/node0/outputs "
              f"trainer.num_nodes=2 trainer.devices=1 > {work}/node0.log 2>&1")
        n1 = (f"cd {work}/node1/kws-train && {TORCHRUN} {common} --rdzv-endpoint 127.0.0.1:{port + 7} "
              f"--rdzv-conf is_host=false,join_timeout=60,read_timeout=60 "
              f"--local-addr 127.0.0.2 train.py {CFG} data.data_dir={work}/node1/data out_dir={work}/node1/outputs "
              f"trainer.num_nodes=2 trainer.devices=1 > {work}/node1.log 2>&1")
        cmd = f"({n0}) & sleep 2; ({n1}) & wait"
        return env_common.replace(f"cd {app}; ", "") + cmd, watcher, res
    elif name == "stalled_shard_read":
        copy_src(app); make_data(data)
        p = os.path.join(data, "train", "shard-00001.npz")
        os.remove(p); os.mkfifo(p)
        cmd = (f"{TR1} --master-port {port} --log-dir {work}/logs --redirects 3 train.py {CFG} "
               f"data.data_dir={data} out_dir={work}/outputs > {work}/console.log 2>&1")
    elif name == "worker_sigkill":
        for n in (0, 1):
            copy_src(os.path.join(work, f"node{n}", "kws-train")); make_data(os.path.join(work, f"node{n}", "data"))
        common = (f"--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-id kws-{port} "
                  f"--rdzv-endpoint 127.0.0.1:{port}")
        args = "trainer.num_nodes=2 trainer.devices=2 trainer.max_epochs=40"
        n0 = (f"cd {work}/node0/kws-train && {TORCHRUN} {common} --local-addr 127.0.0.1 train.py {CFG} "
              f"data.data_dir={work}/node0/data out_dir={work}/node0/outputs {args} > {work}/node0.log 2>&1")
        n1 = (f"cd {work}/node1/kws-train && {TORCHRUN} {common} --local-addr 127.0.0.2 train.py {CFG} "
              f"data.data_dir={work}/node1/data out_dir={work}/node1/outputs {args} > {work}/node1.log 2>&1")
        cmd = f"({n0}) & sleep 2; ({n1}) & wait"
        watcher = ("kill", 2, f"{work}/node0/outputs/checkpoints")
        return env_common.replace(f"cd {app}; ", "") + cmd, watcher, res
    elif name == "corrupt_shard_spawn":
        copy_src(app); make_data(data)
        truncate(os.path.join(data, "train", "shard-00003.npz"))
        cmd = (f"MASTER_PORT={port} {PY} train.py {CFG} data.data_dir={data} out_dir={work}/outputs "
               f"trainer.strategy=ddp_spawn 2>&1 | tee {work}/train.log")
    elif name == "truncated_resume_ckpt":
        ck = prebuilt_checkpoint()
        for n in (0, 1):
            nd = os.path.join(work, f"node{n}")
            copy_src(os.path.join(nd, "kws-train")); make_data(os.path.join(nd, "data"))
            os.makedirs(os.path.join(nd, "outputs", "checkpoints"))
            shutil.copy2(ck, os.path.join(nd, "outputs", "checkpoints", "last.ckpt"))
        truncate(os.path.join(work, "node1", "outputs", "checkpoints", "last.ckpt"), keep=0.5)
        common = (f"--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-id kws-{port} "
                  f"--rdzv-endpoint 127.0.0.1:{port}")
        args = "trainer.num_nodes=2 trainer.devices=1 trainer.max_epochs=6"
        outs = []
        for n in (0, 1):
            nd = f"{work}/node{n}"
            outs.append(f"cd {nd}/kws-train && {TORCHRUN} {common} --local-addr 127.0.0.{n + 1} "
                        f"--log-dir {nd}/torchrun train.py {CFG} data.data_dir={nd}/data out_dir={nd}/outputs "
                        f"resume={nd}/outputs/checkpoints/last.ckpt {args} > {nd}/launch.log 2>&1")
        cmd = f"({outs[0]}) & sleep 2; ({outs[1]}) & wait"
        return env_common.replace(f"cd {app}; ", "") + cmd, watcher, res
    elif name == "callback_attr_rank1":
        copy_src(app); make_data(data)
        cmd = (f"{TR1} --master-port {port} train.py {CFG} data.data_dir={data} out_dir={work}/outputs "
               f"dump_predictions=true 2>&1 | tee {work}/train.log")
    else:
        raise KeyError(name)
    return env_common + cmd, watcher, res


SCENARIOS = ["bad_val_interval", "missing_torchaudio", "host_oom_rank1", "shape_sample_rate",
             "master_port_busy", "rdzv_wrong_endpoint", "stalled_shard_read", "worker_sigkill",
             "corrupt_shard_spawn", "truncated_resume_ckpt", "callback_attr_rank1"]

_ck_lock = threading.Lock()
_ck_path = None


def prebuilt_checkpoint():
    """A normal checkpoint from an earlier (healthy) single-process run, reused for resume."""
    global _ck_path
    with _ck_lock:
        if _ck_path:
            return _ck_path
        w = os.path.join(RUNS, secrets.token_hex(4))
        copy_src(os.path.join(w, "kws-train")); make_data(os.path.join(w, "data"))
        subprocess.run(f"cd {w}/kws-train && {PY} train.py {CFG} data.data_dir={w}/data out_dir={w}/outputs "
                       f"trainer.devices=1 trainer.strategy=auto trainer.max_epochs=2",
                       shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
        _ck_path = os.path.join(w, "outputs", "checkpoints", "last.ckpt")
        return _ck_path


IGNORE = shutil.ignore_patterns("data", "kws-train", "*.ckpt", "*.npz")


def run_one(name, idx, results):
    port = BASE_PORT + 20 * idx
    work = os.path.join(RUNS, secrets.token_hex(6))
    os.makedirs(work)
    meta = {"scenario": name, "work_dir": work, "port": port}
    cmd, watcher, res = scen(name, port, work)
    meta["command"] = cmd
    blockers = [port_blocker(p, meta) for kind, p in res if kind == "blocker"]
    env = dict(os.environ)
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    t0 = time.time()
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=work, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    th = None
    if watcher and watcher[0] == "kill":
        th = threading.Thread(target=kill_rank_after_checkpoint(work, watcher[1], watcher[2], meta), args=(proc,))
        th.start()
    try:
        rc = proc.wait(timeout=TIMEOUT)
        meta["timed_out"] = False
    except subprocess.TimeoutExpired:
        meta["timed_out"] = True
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    # make sure nothing of this job is left
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if th:
        th.join()
    for b in blockers:
        b.close()
    meta["exit_code"] = rc
    meta["wall_s"] = round(time.time() - t0, 1)
    dst = os.path.join(results, f"cpu13-{name}")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(work, dst, ignore=IGNORE, symlinks=True)
    print(f"[{name}] rc={rc} wall={meta['wall_s']}s timed_out={meta['timed_out']} -> {dst}", flush=True)
    return meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.environ.get("RESULTS", "/tmp/cpu13-results"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("scenarios", nargs="*")
    a = ap.parse_args()
    names = a.scenarios or SCENARIOS
    os.makedirs(os.path.join(a.results, "_meta"), exist_ok=True)
    os.makedirs(RUNS, exist_ok=True)
    runs_path = os.path.join(a.results, "_meta", "runs.json")
    runs = json.load(open(runs_path)) if os.path.exists(runs_path) else {}
    # heavy ones first so the two lanes finish together
    order = sorted(names, key=lambda n: 0 if n in ("stalled_shard_read", "rdzv_wrong_endpoint",
                                                   "master_port_busy", "worker_sigkill") else 1)
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futs = {ex.submit(run_one, n, SCENARIOS.index(n), a.results): n for n in order}
        for f in cf.as_completed(futs):
            m = f.result()
            runs[m["scenario"]] = m
            json.dump(runs, open(runs_path, "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
