#!/usr/bin/env python
"""Harness: run ddpmlite failure scenarios in neutral work dirs and collect their logs unchanged.

    RESULTS=/dir [PROFILE=gpu|cpu] [OUT=/out] python run_all.py [NAME ...]
"""
import json
import os
import random
import re
import shlex
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
PROFILE = os.environ.get("PROFILE", "gpu")
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu12-results"))
OUT = os.environ.get("OUT", "")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g12runs")
TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "150" if PROFILE == "gpu" else "400"))
MAX_PAR = int(os.environ.get("MAX_PAR", "3" if PROFILE == "gpu" else "1"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29700"))
PY = sys.executable

COMMON_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
              "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "2" if PROFILE == "gpu" else "1"}

PROFILE_CFG = {
    "gpu": {"train": {"device": "cuda:0", "backend": "gloo", "precision": "bf16"}},
    "cpu": {"train": {"device": "cpu", "backend": "gloo", "precision": "fp32"},
            "model": {"base_channels": 16, "channel_mult": [1, 2, 2], "num_res_blocks": 1, "groups": 8},
            "data": {"batch_size": 8, "num_workers": 1},
            "sample": {"num_images": 4, "batch_size": 4, "steps": 10}},
}

DATA4 = [["--out", "data/train", "--shards", "4"]]

# style: A torchrun|tee  B torchrun --log-dir/--tee  C two torchrun agents (nodes)
#        M python -m torch.distributed.run > out/err   S torch.multiprocessing.spawn   D train.sh
SCENARIOS = {
    "s01": dict(name="preview-res-oom", style="A", nproc=3, gpu_only=True, data=DATA4,
                cfg={"sample": {"every": 10, "image_size": 512}}, overrides=["train.max_steps=40"]),
    "s02": dict(name="label-base-assert", style="B", nproc=2, gpu_only=True,
                data=[["--out", "data/train", "--shards", "3"],
                      ["--out", "data/train", "--shards", "1", "--start", "3", "--label-base", "1"]],
                cfg={"data": {"partition": "shard"}}, overrides=["train.max_steps=40"]),
    "s03": dict(name="node-rank-device", style="C", gpu_only=True, data=DATA4,
                overrides=["train.max_steps=40", "train.device=cuda:{rank}"]),
    "s04": dict(name="nccl-shared-gpu", style="M", nproc=2, gpu_only=True, data=DATA4,
                cfg={"train": {"backend": "nccl"}}, overrides=["train.max_steps=40"], env={"NCCL_DEBUG": "WARN"}),
    "s05": dict(name="resume-map-location", style="D", nproc=2, gpu_only=True, data=DATA4,
                prep=["train.max_steps=6", "train.save_every=6", "sample.every=0"],
                overrides=["train.resume=latest", "train.max_steps=30"]),
    "s06": dict(name="sampling-stall-hang", style="B", nproc=2, data=DATA4,
                cfg={"data": {"partition": "shard"}, "sample": {"every": 10}},
                overrides=["train.max_steps=60", "sample.num_images=4096", "sample.batch_size=64",
                           "sample.steps=1000"]),
    "s07": dict(name="oom-killer-sigkill", style="S", nproc=2, data=DATA4,
                cfg={"data": {"partition": "shard"}, "train": {"log_every": 2}},
                overrides=["train.max_steps=200"], kill=dict(rank=1, after_step=10)),
    "s08": dict(name="fid-import-missing", style="A", nproc=4, data=[["--out", "data/train", "--shards", "8"]],
                cfg={"data": {"partition": "shard"}, "sample": {"every": 10, "num_images": 64}},
                overrides=["train.max_steps=40", "sample.fid=true"]),
    "s09": dict(name="truncated-shard", style="M", nproc=3, data=[["--out", "data/train", "--shards", "6"]],
                truncate=("data/train/shard_00005.images.npy", 0.6),
                cfg={"data": {"partition": "shard"}}, overrides=["train.max_steps=40"]),
    "s10": dict(name="ema-bf16-dtype", style="B", nproc=2, data=DATA4,
                cfg={"ema": {"dtype": "bf16"}, "sample": {"every": 10}}, overrides=["train.max_steps=40"]),
    "s11": dict(name="precision-name", style="A", nproc=2, data=DATA4,
                overrides=["train.max_steps=40", "train.precision=bf16-mixed"]),
    "s12": dict(name="crop-not-divisible", style="D", nproc=2, data=DATA4,
                cfg={"data": {"crop_size": 30}}, overrides=["train.max_steps=40"]),
}
BY_NAME = {v["name"]: k for k, v in SCENARIOS.items()}
LONG = ("s06", "s03", "s07")  # start these first


def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict):
            merge(a.setdefault(k, {}), v)
        else:
            a[k] = v
    return a


def rand_id(n=8):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def write_cfg(wd, extra):
    with open(os.path.join(HERE, "configs", "base.json")) as f:
        cfg = json.load(f)
    merge(cfg, json.loads(json.dumps(PROFILE_CFG[PROFILE])))
    merge(cfg, json.loads(json.dumps(extra)))
    with open(os.path.join(wd, "configs", "run.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def make_workdir(sc):
    base = os.path.join(WORK_ROOT, rand_id())
    wd = os.path.join(base, "ddpm")
    os.makedirs(wd)
    for f in ("train.py", "train.sh"):
        shutil.copy2(os.path.join(HERE, f), wd)
    for d in ("ddpmlite", "tools"):
        shutil.copytree(os.path.join(HERE, d), os.path.join(wd, d), ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(wd, "configs"))
    write_cfg(wd, sc.get("cfg", {}))
    os.makedirs(os.path.join(wd, "tmp"))
    return base, wd


def marked_pids(mark):
    out = []
    needle = f"G12_MARK={mark}".encode()
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(int(p))
        except OSError:
            pass
    return out


def kill_tree(proc, mark):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in marked_pids(mark):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM:
            t0 = time.time()
            while time.time() - t0 < 10 and (proc.poll() is None or marked_pids(mark)):
                time.sleep(0.5)


def console_file(sc):
    return {"A": "train.log", "B": "console.log", "C": "node0.log", "M": "out.log", "S": "stdout.log",
            "D": "job.out"}[sc["style"]]


def killer(sc, wd, mark, stop, rec):
    """Play the host's OOM killer: SIGKILL one rank once rank 0 has logged a given step."""
    k = sc["kill"]
    path = os.path.join(wd, console_file(sc))
    pid_re = re.compile(rf"rank {k['rank']}/\d+ pid (\d+)")
    step_re = re.compile(r"\[rank0\].*step\s+(\d+)/")
    while not stop.is_set():
        time.sleep(0.5)
        try:
            with open(path, errors="replace") as f:
                txt = f.read()
        except OSError:
            continue
        m = pid_re.search(txt)
        steps = [int(s) for s in step_re.findall(txt)]
        if m and steps and max(steps) >= k["after_step"]:
            pid = int(m.group(1))
            if pid in marked_pids(mark):
                os.kill(pid, signal.SIGKILL)
                rec["killed_pid"] = pid
            return


def commands(sc, port):
    n = sc.get("nproc", 2)
    ov = " ".join(shlex.quote(o) for o in sc.get("overrides", []))
    st = sc["style"]
    if st == "A":
        return [f"torchrun --nproc-per-node {n} --master-port {port} train.py --config configs/run.json {ov} "
                f"2>&1 | tee train.log"]
    if st == "B":
        return [f"torchrun --nproc-per-node={n} --master-port={port} --log-dir logs --redirects 3 --tee 3 "
                f"train.py --config configs/run.json {ov} > console.log 2>&1"]
    if st == "C":
        return [f"torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=ddpm --local-addr=127.0.0.{k + 1} "
                f"train.py --config configs/run.json {ov} > node{k}.log 2>&1" for k in (0, 1)]
    if st == "M":
        return [f"python -m torch.distributed.run --nproc_per_node {n} --master_port {port} train.py "
                f"--config configs/run.json {ov} > out.log 2> err.log"]
    if st == "S":
        return [f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port} python train.py --spawn {n} --config configs/run.json "
                f"{ov} > stdout.log 2> stderr.log"]
    if st == "D":
        return [f"MASTER_PORT={port} NPROC={n} bash train.sh {ov} > job.out 2> job.err"]
    raise ValueError(st)


def run_scenario(key, idx):
    sc = SCENARIOS[key]
    name = sc["name"]
    port = BASE_PORT + 10 * idx
    base, wd = make_workdir(sc)
    mark = rand_id(12)
    env = dict(os.environ)
    env.update(COMMON_ENV)
    env.update(sc.get("env", {}))
    env["TMPDIR"] = os.path.join(wd, "tmp")
    env["PATH"] = os.path.dirname(PY) + os.pathsep + env.get("PATH", "")
    env["G12_MARK"] = mark
    rec = {"scenario": name, "style": sc["style"], "workdir": wd, "port": port}
    t0 = time.time()
    for args in sc["data"]:
        subprocess.run([PY, "tools/make_data.py"] + args, cwd=wd, env=env, check=True, stdout=subprocess.DEVNULL)
    if sc.get("truncate"):
        path, frac = sc["truncate"]
        p = os.path.join(wd, path)
        with open(p, "r+b") as f:
            f.truncate(int(os.path.getsize(p) * frac))
    if sc.get("prep"):
        os.makedirs(os.path.join(wd, "_prep"))
        pov = " ".join(shlex.quote(o) for o in sc["prep"])
        cmd = (f"torchrun --nproc-per-node={sc.get('nproc', 2)} --master-port={port + 5} train.py "
               f"--config configs/run.json {pov} > _prep/prep.log 2>&1")
        r = subprocess.run(["bash", "-c", cmd], cwd=wd, env=env, timeout=TIMEOUT)
        rec["prep_rc"] = r.returncode
    cmds = commands(sc, port)
    rec["commands"] = cmds
    t1 = time.time()
    procs = []
    for i, c in enumerate(cmds):
        if i:
            time.sleep(3)
        procs.append(subprocess.Popen(["bash", "-c", c], cwd=wd, env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    stop = threading.Event()
    kt = None
    if sc.get("kill"):
        kt = threading.Thread(target=killer, args=(sc, wd, mark, stop, rec), daemon=True)
        kt.start()
    timed_out = False
    deadline = t1 + TIMEOUT
    while any(p.poll() is None for p in procs):
        if time.time() > deadline:
            timed_out = True
            break
        time.sleep(0.5)
    stop.set()
    if kt:
        kt.join()
    for p in procs:
        kill_tree(p, mark)
    for p in procs:
        p.wait()
    rec.update(rc=[p.returncode for p in procs], wall_s=round(time.time() - t1, 1),
               setup_s=round(t1 - t0, 1), timed_out=timed_out)
    dst = os.path.join(RESULTS, f"gpu12-{name}")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(wd, dst, ignore=shutil.ignore_patterns(
        "ddpmlite", "tools", "data", "checkpoints", "tmp", "_prep", "train.py", "train.sh", "configs",
        "__pycache__", "*.pt", "*.npy"))
    shutil.copytree(os.path.join(wd, "configs"), os.path.join(dst, "configs"))
    print(f"[harness] {name}: rc={rec['rc']} wall={rec['wall_s']}s timed_out={timed_out}", flush=True)
    with open(os.path.join(RESULTS, "_meta", "run_log.txt"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    if not os.environ.get("KEEP_WORK"):
        shutil.rmtree(base, ignore_errors=True)
    return rec


def versions():
    code = ("import sys,torch;print('python',sys.version.split()[0]);print('torch',torch.__version__);"
            "print('cuda',torch.version.cuda);print('cuda_available',torch.cuda.is_available());"
            "print('nccl',torch.cuda.nccl.version() if torch.cuda.is_available() else None);"
            "print('gpus',[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]);"
            "import numpy;print('numpy',numpy.__version__)")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    txt = out.stdout + out.stderr
    try:
        txt += "\n" + subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except Exception as e:  # noqa: BLE001
        txt += f"\nnvidia-smi: {e}\n"
    with open(os.path.join(RESULTS, "_meta", "versions.txt"), "w") as f:
        f.write(f"profile {PROFILE}\n" + txt)


def main():
    names = sys.argv[1:]
    keys = [BY_NAME[n] for n in names] if names else list(SCENARIOS)
    if PROFILE == "cpu" and not os.environ.get("G12_FORCE"):
        keys = [k for k in keys if not SCENARIOS[k].get("gpu_only")]
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    versions()
    t0 = time.time()
    idx = {k: i for i, k in enumerate(SCENARIOS)}
    keys.sort(key=lambda k: k not in LONG)
    with ThreadPoolExecutor(MAX_PAR) as ex:
        recs = list(ex.map(lambda k: run_scenario(k, idx[k]), keys))
    with open(os.path.join(RESULTS, "_meta", "runs.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(time.time() - t0, 1), "runs": recs}, f, indent=1)
    print(f"[harness] done in {time.time() - t0:.0f}s -> {RESULTS}", flush=True)
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        with tarfile.open(os.path.join(OUT, "gpu12_samples.tar.gz"), "w:gz") as tf:
            tf.add(RESULTS, arcname=os.path.basename(RESULTS))
        print(f"[harness] wrote {OUT}/gpu12_samples.tar.gz", flush=True)


if __name__ == "__main__":
    main()
