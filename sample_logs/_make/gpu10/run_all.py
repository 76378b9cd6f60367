#!/usr/bin/env python
"""Harness: runs gpu10 scenarios in neutral work dirs and collects their logs unchanged."""
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scenarios import SCENARIOS  # noqa: E402

PROFILE = os.environ.get("PROFILE", "gpu")
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu10-results"))
OUT = os.environ.get("OUT")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g10runs")
MAX_PAR = int(os.environ.get("MAX_PAR", "6" if PROFILE == "gpu" else "2"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29600"))
STEPS = 20 if PROFILE == "gpu" else 6
CODE = ["train.py", "prep_data.py", "launch.sh", "tinyasr", "conf"]
KEEP_OUT = set(CODE) | {"data", "tmp", "exp", "__pycache__"}
lock = threading.Lock()


def rid(n=8):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def marked_pids(mark):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"G10_MARK={mark}".encode() in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def kill_tree(procs, mark):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 15
    while time.time() < deadline and (marked_pids(mark) or any(p.poll() is None for p in procs)):
        time.sleep(0.5)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def base_args():
    a = f"--config conf/base.json --max-steps {STEPS}"
    if PROFILE == "cpu":
        a += " --set model.layers=2 --set train.eval_every=3 --set train.log_every=1 --set data.num_workers=1"
    return a


def commands(sc, port):
    args = base_args() + " " + sc.get("args", "").format(steps=STEPS)
    st = sc["style"]
    if st == "A":
        return [(f"torchrun --nproc-per-node=2 --master-port={port} train.py {args} 2>&1 | tee train.log", {}, 0)]
    if st == "B":
        entry = "--no-python ./launch.sh" if sc.get("wrapper") else "train.py"
        return [(f"torchrun --nproc-per-node=2 --master-port={port} --log-dir logs --redirects 3 --tee 3 {entry} {args} "
                 f"> console.log 2>&1", {}, 0)]
    if st == "C":
        out = []
        for k in (0, 1):
            env = {"CUDA_VISIBLE_DEVICES": str(k)}
            env.update(sc.get("node_env", {}).get(k, {}))
            out.append((f"torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                        f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=asr-train --local-addr=127.0.0.{k + 1} "
                        f"train.py {args} > node{k}.log 2>&1", env, 3 * k))
        return out
    if st == "D":
        return [(f"python train.py --spawn 2 {args} > train.out 2> train.err", {"MASTER_PORT": str(port)}, 0)]
    if st == "E":
        return [(f"python -m torch.distributed.run --nproc_per_node 2 --master_port {port} train.py {args} "
                 f"> stdout.log 2> stderr.log", {}, 0)]
    raise ValueError(st)


def run_one(i, sc):
    name = sc["name"]
    mark = rid(12)
    work = os.path.join(WORK_ROOT, rid(), "asr")
    os.makedirs(os.path.join(work, "tmp"))
    for c in CODE:
        s = os.path.join(HERE, c)
        (shutil.copytree if os.path.isdir(s) else shutil.copy2)(s, os.path.join(work, c))
    env = dict(os.environ)
    env.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                "G10_MARK": mark, "TMPDIR": os.path.join(work, "tmp"), "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1"})
    if PROFILE == "cpu":
        env.update({"TINYASR_CPU": "1", "OMP_NUM_THREADS": "1"})
    env.update(sc.get("env", {}))
    port = BASE_PORT + 10 * i
    prep = [sys.executable, "prep_data.py", "--out", "data"]
    if sc.get("data"):
        prep += ["--extra", sc["data"]]
    subprocess.run(prep, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
    if sc.get("prep_args"):
        cmd = (f"torchrun --nproc-per-node=2 --master-port={port + 5} train.py {base_args()} "
               f"{sc['prep_args'].format(steps=STEPS)} > tmp/prep.log 2>&1")
        r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, timeout=600)
        if r.returncode:
            print(f"[{name}] prep run failed rc={r.returncode}", flush=True)
    timeout = int(os.environ.get("SCEN_TIMEOUT") or sc.get(f"timeout_{PROFILE}", 150 if PROFILE == "gpu" else 240))
    t0 = time.time()
    procs, cmds = [], []
    for cmd, extra_env, delay in commands(sc, port):
        if delay:
            time.sleep(delay)
        e = dict(env)
        e.update(extra_env)
        procs.append(subprocess.Popen(["bash", "-c", "set -o pipefail; " + cmd], cwd=work, env=e, start_new_session=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        cmds.append({"cmd": cmd, "env": extra_env})
    timed_out = False
    while any(p.poll() is None for p in procs):
        if time.time() - t0 > timeout:
            timed_out = True
            break
        time.sleep(1)
    kill_tree(procs, mark)
    rcs = [p.wait() for p in procs]
    wall = round(time.time() - t0, 1)
    dest = os.path.join(RESULTS, f"gpu10-{name}")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for entry in os.listdir(work):
        if entry in KEEP_OUT:
            continue
        s = os.path.join(work, entry)
        if os.path.isdir(s):
            shutil.copytree(s, os.path.join(dest, entry), symlinks=True)
        else:
            shutil.copy2(s, os.path.join(dest, entry))
    rec = {"scenario": name, "rc": rcs, "wall_s": wall, "timed_out": timed_out, "work": work, "commands": cmds,
           "env": sc.get("env", {}), "profile": PROFILE}
    with lock:
        with open(os.path.join(RESULTS, "_meta", "run_log.txt"), "a") as f:
            f.write(json.dumps(rec) + "\n")
    print(f"[{name}] rc={rcs} wall={wall}s timed_out={timed_out}", flush=True)
    if os.environ.get("KEEP_WORK") != "1":
        shutil.rmtree(os.path.dirname(work), ignore_errors=True)
    return rec


def versions():
    py = ("import sys,torch;print('python',sys.version.split()[0]);print('torch',torch.__version__);"
          "print('cuda',torch.version.cuda);"
          "print('nccl',torch.cuda.nccl.version() if torch.cuda.is_available() else None);"
          "print('gpus',[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])")
    out = subprocess.run([sys.executable, "-c", py], capture_output=True, text=True).stdout
    try:
        out += subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out += "nvidia-smi: not available\n"
    return out


def main():
    names = sys.argv[1:]
    scen = [(i, s) for i, s in enumerate(SCENARIOS) if (not names or s["name"] in names)
            and (PROFILE == "gpu" or not s.get("gpu_only") or s["name"] in names)]
    unknown = set(names) - {s["name"] for s in SCENARIOS}
    if unknown:
        sys.exit(f"unknown scenario(s): {sorted(unknown)}")
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    with open(os.path.join(RESULTS, "_meta", "versions.txt"), "w") as f:
        f.write(versions())
    t0 = time.time()
    recs = []
    for i, s in scen:
        if s.get("exclusive"):
            recs.append(run_one(i, s))
    rest = [(i, s) for i, s in scen if not s.get("exclusive")]
    rest.sort(key=lambda x: -x[1].get(f"timeout_{PROFILE}", 0) - (100 if x[1]["style"] == "C" else 0))
    with ThreadPoolExecutor(MAX_PAR) as ex:
        recs += list(ex.map(lambda x: run_one(*x), rest))
    with open(os.path.join(RESULTS, "_meta", "runs.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(time.time() - t0, 1), "runs": recs}, f, indent=1)
    print(f"total wall {time.time() - t0:.0f}s", flush=True)
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        with tarfile.open(os.path.join(OUT, "gpu10_samples.tar.gz"), "w:gz") as t:
            t.add(RESULTS, arcname=os.path.basename(RESULTS.rstrip("/")))
        print("wrote", os.path.join(OUT, "gpu10_samples.tar.gz"))


if __name__ == "__main__":
    main()
