#!/usr/bin/env python3
"""Run the failure scenarios and collect what each job wrote.

    RESULTS=/some/dir python3 run_all.py [SCENARIO ...]

Environment:
  RESULTS            where gpu4-<scenario>/ and _meta/ are written (required)
  PROFILE            gpu (default) or cpu (gloo; skips the CUDA-only scenarios)
  PARALLEL           scenarios run at once (default 6 on gpu, 2 on cpu); 'exclusive' ones run alone
  SCENARIO_TIMEOUT   seconds before a scenario's whole process tree is killed (default 170)
  WORK_ROOT          parent of the per-scenario work dirs (default /tmp/sft-runs)
  OUT                if set, $RESULTS is packed into $OUT/gpu4_samples.tar.gz
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import signal
import string
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
from scenarios import SCENARIOS  # noqa: E402

CODE_FILES = [
    "finetune.py", "trainer.py", "trainer_utils.py", "callbacks.py", "data.py", "dist_utils.py",
    "modeling.py", "p2p_communication.py", "launch.py", "prepare_data.py", "make_fixtures.py",
]
FORCED_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
BASE_PORT = int(os.environ.get("BASE_PORT", "29400"))


# --------------------------------------------------------------------------- process tree
def _children_map():
    cm = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        cm.setdefault(ppid, []).append(int(d))
    return cm


def descendants(pid):
    cm = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in cm.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc, grace=10.0):
    pids = [proc.pid] + descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace
        while time.time() < deadline:
            alive = [p for p in pids if os.path.exists(f"/proc/{p}") and not _is_zombie(p)]
            if not alive:
                return
            time.sleep(0.5)
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")] + descendants(proc.pid)


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rfind(")") + 2] == "Z"
    except OSError:
        return True


# --------------------------------------------------------------------------- commands
def torchrun_cmd():
    return "torchrun" if shutil.which("torchrun") else "python3 -m torch.distributed.run"


def launch_command(sc, port, profile):
    tr = torchrun_cmd()
    script = "finetune.py --config config.json"
    style = sc["style"]
    if style == "tee":
        return f"{tr} --nproc-per-node=2 --master-port={port} {script} 2>&1 | tee train.log"
    if style == "rank0":
        return f"{tr} --nproc-per-node=2 --master-port={port} --local-ranks-filter 0 {script} 2>&1 | tee train.log"
    if style == "logdir":
        return (f"{tr} --nproc-per-node=2 --master-port={port} --log-dir torchrun_logs --redirects 3 --tee 3 "
                f"{script} > console.log 2>&1")
    if style == "launcher":
        extra = " ".join(sc.get("launcher_args", []))
        return (f"python3 launch.py --num-processes 2 --main-process-port {port} {extra} {script} "
                f"> train.out 2> train.err")
    if style == "twonode":
        parts = []
        for node in (0, 1):
            env = []
            if sc.get("node_env"):
                env.append(f"NODE_LOCAL_SCRATCH=$PWD/scratch/node{node}")
            if profile == "gpu":
                env.append(f"CUDA_VISIBLE_DEVICES={node}")
            parts.append(
                f"{' '.join(env)} {tr} --nnodes=2 --nproc-per-node=1 --node-rank={node} --rdzv-backend=c10d "
                f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=sft-{port} {script} > node{node}.log 2>&1 &"
            )
        return (f"{parts[0]}\npid0=$!\nsleep 3\n{parts[1]}\npid1=$!\n"
                "wait $pid0; rc0=$?\nwait $pid1; rc1=$?\n"
                "if [ $rc0 -ne 0 ]; then exit $rc0; fi\nexit $rc1")
    raise ValueError(style)


# --------------------------------------------------------------------------- one scenario
def _rand(n=6):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def prepare_workdir(name, sc, work_root, meta_dir):
    work = tempfile.mkdtemp(prefix="run-", dir=work_root)
    for f in CODE_FILES:
        shutil.copy2(os.path.join(HERE, f), os.path.join(work, f))
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(sc["config"], f, indent=2)
    spec_path = os.path.join(work, "data_spec.json")
    with open(spec_path, "w") as f:
        json.dump(sc.get("data", {}), f)
    prep_log = open(os.path.join(meta_dir, f"prep-{name}.log"), "w")
    env = dict(os.environ, **FORCED_ENV)
    subprocess.run(["python3", "prepare_data.py", "--out", "data", "--spec", "data_spec.json"], cwd=work,
                   stdout=prep_log, stderr=subprocess.STDOUT, check=True, env=env)
    os.remove(spec_path)
    for rel, content in sc.get("files", {}).items():
        p = os.path.join(work, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(content)
    for fx in sc.get("fixtures", []):
        subprocess.run(["python3", "make_fixtures.py", fx[0], "--config", "config.json"] + fx[1:], cwd=work,
                       stdout=prep_log, stderr=subprocess.STDOUT, check=True, env=env)
    if sc.get("node_env"):
        for node in (0, 1):
            os.makedirs(os.path.join(work, "scratch", f"node{node}"), exist_ok=True)
    prep_log.close()
    return work


def collect(work, dest):
    os.makedirs(dest, exist_ok=True)
    for f in sorted(os.listdir(work)):
        p = os.path.join(work, f)
        if os.path.isfile(p) and f.endswith((".log", ".out", ".err")):
            shutil.copy2(p, os.path.join(dest, f))
    if os.path.isdir(os.path.join(work, "torchrun_logs")):
        shutil.copytree(os.path.join(work, "torchrun_logs"), os.path.join(dest, "torchrun_logs"))
    if os.path.isdir(os.path.join(work, "output", "logs")):
        shutil.copytree(os.path.join(work, "output", "logs"), os.path.join(dest, "trainer_logs"))


def run_scenario(name, sc, idx, profile, results, work_root, timeout, meta_dir):
    t_start = time.time()
    rec = {"scenario": name, "style": sc["style"], "rc": None, "wall_s": None, "timed_out": False}
    try:
        work = prepare_workdir(name, sc, work_root, meta_dir)
    except Exception as e:  # noqa: BLE001
        rec["rc"] = "prep-failed"
        rec["error"] = repr(e)
        return rec
    rec["workdir"] = work
    port = BASE_PORT + 20 * idx
    cmd = launch_command(sc, port, profile)
    env = dict(os.environ)
    env.update(FORCED_ENV)
    env.update(sc.get("env", {}))
    if profile == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    script = "set -o pipefail\n" + cmd + "\n"
    t0 = time.time()
    proc = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rec["timed_out"] = True
        kill_tree(proc)
        rc = proc.wait()
    # stragglers (e.g. workers in their own session) that outlived the launcher
    for p in descendants(proc.pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    rec["rc"] = rc
    rec["wall_s"] = round(time.time() - t0, 1)
    rec["total_s"] = round(time.time() - t_start, 1)
    collect(work, os.path.join(results, f"gpu4-{name}"))
    return rec


# --------------------------------------------------------------------------- meta
def write_versions(path, profile):
    lines = [f"profile: {profile}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
             f"platform: {platform.platform()}", f"python: {sys.version.split()[0]}"]
    probe = ("import torch, numpy; print('torch:', torch.__version__); print('cuda:', torch.version.cuda); "
             "print('cuda_available:', torch.cuda.is_available()); "
             "v = torch.cuda.nccl.version() if torch.cuda.is_available() else None; "
             "print('nccl:', '.'.join(map(str, v)) if isinstance(v, tuple) else v); "
             "print('gpus:', [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]); "
             "print('numpy:', numpy.__version__)")
    r = subprocess.run(["python3", "-c", probe], capture_output=True, text=True)
    lines.append(r.stdout.strip() or r.stderr.strip())
    lines.append(f"torchrun: {shutil.which('torchrun')}")
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        lines.append(r.stdout)
    lines.append("forced env: " + " ".join(f"{k}={v}" for k, v in FORCED_ENV.items()))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    results = os.environ.get("RESULTS")
    if not results:
        sys.exit("RESULTS is not set")
    profile = os.environ.get("PROFILE", "gpu")
    if profile not in ("gpu", "cpu"):
        sys.exit("PROFILE must be gpu or cpu")
    parallel = int(os.environ.get("PARALLEL", "6" if profile == "gpu" else "2"))
    timeout = float(os.environ.get("SCENARIO_TIMEOUT", "170"))
    work_root = os.environ.get("WORK_ROOT", "/tmp/sft-runs")
    os.makedirs(work_root, exist_ok=True)
    meta = os.path.join(results, "_meta")
    os.makedirs(meta, exist_ok=True)

    names = sys.argv[1:] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenarios: {unknown}; known: {list(SCENARIOS)}")
    order = list(SCENARIOS)
    skipped = []
    if profile == "cpu":
        skipped = [n for n in names if SCENARIOS[n].get("cuda_only")]
        names = [n for n in names if not SCENARIOS[n].get("cuda_only")]
    write_versions(os.path.join(meta, "versions.txt"), profile)

    log_path = os.path.join(meta, "run_log.tsv")
    lock = threading.Lock()
    records = []

    def log(rec):
        with lock:
            records.append(rec)
            new = not os.path.exists(log_path)
            with open(log_path, "a") as f:
                if new:
                    f.write("scenario\tstyle\trc\twall_s\ttimed_out\tprofile\n")
                f.write(f"{rec['scenario']}\t{rec['style']}\t{rec['rc']}\t{rec['wall_s']}\t{rec['timed_out']}\t{profile}\n")
            print(f"[run_all] {rec['scenario']:<34} rc={rec['rc']} wall={rec['wall_s']}s"
                  f"{' TIMEOUT' if rec['timed_out'] else ''}", flush=True)

    for n in skipped:
        print(f"[run_all] {n:<34} skipped (needs CUDA)", flush=True)

    # long (watchdog-timeout) scenarios first so that they overlap with the short ones
    shared = [n for n in names if not SCENARIOS[n].get("exclusive")]
    shared.sort(key=lambda n: not SCENARIOS[n].get("long"))
    exclusive = [n for n in names if SCENARIOS[n].get("exclusive")]
    t0 = time.time()

    sem = threading.Semaphore(parallel)
    threads = []

    def worker(n):
        try:
            log(run_scenario(n, SCENARIOS[n], order.index(n), profile, results, work_root, timeout, meta))
        finally:
            sem.release()

    for n in shared:
        sem.acquire()
        print(f"[run_all] start {n}", flush=True)
        th = threading.Thread(target=worker, args=(n,))
        th.start()
        threads.append(th)
        time.sleep(1.0)
    for th in threads:
        th.join()
    for n in exclusive:
        print(f"[run_all] start {n} (alone)", flush=True)
        log(run_scenario(n, SCENARIOS[n], order.index(n), profile, results, work_root, timeout, meta))

    total = round(time.time() - t0, 1)
    with open(os.path.join(meta, "run_log.json"), "w") as f:
        json.dump({"profile": profile, "total_wall_s": total, "skipped": skipped, "runs": records}, f, indent=2)
    print(f"[run_all] done in {total}s -> {results}", flush=True)

    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        tar_path = os.path.join(out, "gpu4_samples.tar.gz")
        with tarfile.open(tar_path, "w:gz") as tar:
            tar.add(results, arcname=os.path.basename(os.path.normpath(results)))
        print(f"[run_all] packed {tar_path}", flush=True)


if __name__ == "__main__":
    main()
