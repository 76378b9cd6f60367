#!/usr/bin/env python
"""Harness: run the vitrain failure scenarios in neutral work dirs and keep their logs unchanged.

    RESULTS=/dir [PROFILE=gpu|cpu] [OUT=/out] [MAX_PAR=3] python run_all.py [NAME ...]
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
sys.path.insert(0, HERE)
from vitrain.config import dump_toml  # noqa: E402

PROFILE = os.environ.get("PROFILE", "gpu")
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu13-results"))
OUT = os.environ.get("OUT", "")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g13runs")
TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "150" if PROFILE == "gpu" else "300"))
MAX_PAR = int(os.environ.get("MAX_PAR", "3" if PROFILE == "gpu" else "1"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29800"))
FORCE = bool(os.environ.get("G13_FORCE"))
PY = sys.executable

COMMON_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
              "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "2" if PROFILE == "gpu" else "1"}

PROFILE_CFG = {
    "gpu": {"train": {"device": "cuda", "backend": "gloo", "precision": "bf16"}},
    "cpu": {"train": {"device": "cpu", "backend": "gloo", "precision": "fp32"},
            "model": {"embed_dim": 96, "depth": 2},
            "data": {"batch_size": 16, "num_workers": 1},
            "compile": {"backend": "aot_eager"},
            "eval": {"batch_size": 64, "map_images": 4}},
}

TRAIN4 = [["--out", "data/train", "--shards", "4"]]
VAL = [["--out", "data/val", "--shards", "1", "--per-shard", "256", "--seed", "77"]]

# style: A torchrun | tee   B torchrun --log-dir --redirects 3 --tee 3   C two torchrun agents as two nodes
#        M python -m torch.distributed.run > out.log 2> err.log      S torch.multiprocessing.spawn
#        D train.sh (torchrun) > job.out 2> job.err                   P one plain `python train.py --rank r` per rank
SCENARIOS = {
    "s01": dict(name="attn-map-oom", style="A", nproc=3, gpu_only=True, data=TRAIN4,
                cfg={"eval": {"every": 10}}, overrides=["train.max_steps=60", "eval.attn_maps=true",
                                                        "eval.map_size=1024"]),
    "s02": dict(name="unlabeled-recompile", style="B", nproc=2, data=[
                ["--out", "data/train", "--shards", "3"],
                ["--out", "data/train", "--shards", "1", "--start", "3", "--unlabeled", "0.3"]],
                cfg={"data": {"partition": "shard"}, "compile": {"enabled": True},
                     "train": {"dist_timeout_s": 90}},
                overrides=["train.max_steps=60"], timeout=220),
    "s03": dict(name="label-range-assert", style="C", gpu_only=True, data=[
                ["--out", "data/train", "--shards", "3"],
                ["--out", "data/train", "--shards", "1", "--start", "3", "--classes", "100"]],
                cfg={"data": {"partition": "shard"}, "aug": {"mixup_alpha": 0.0}},
                overrides=["train.max_steps=60"]),
    "s04": dict(name="fp16-unscale", style="M", nproc=2, data=TRAIN4,
                overrides=["train.max_steps=60", "train.precision=fp16"]),
    "s05": dict(name="aug-device-fork", style="A", nproc=2, gpu_only=True, data=TRAIN4,
                overrides=["train.max_steps=60", "data.aug_device=cuda"]),
    "s06": dict(name="resume-ema-device", style="P", nproc=2, gpu_only=True, data=TRAIN4,
                prep=["train.max_steps=6", "ckpt.every=6", "eval.every=0"],
                overrides=["ckpt.resume=latest", "train.max_steps=40"]),
    "s07": dict(name="compile-mode-name", style="D", nproc=2, data=TRAIN4,
                cfg={"compile": {"enabled": True, "backend": "inductor"}},
                overrides=["train.max_steps=60", "compile.mode=max_autotune"]),
    "s08": dict(name="posembed-compile-shape", style="M", nproc=2, data=TRAIN4,
                cfg={"compile": {"enabled": True}}, overrides=["train.max_steps=60", "data.img_size=48"]),
    "s09": dict(name="fifo-shard-hang", style="B", nproc=2, data=TRAIN4, fifo="data/train/images_00003.npy",
                cfg={"data": {"partition": "shard"}}, overrides=["train.max_steps=60"]),
    "s10": dict(name="rank-sigkill", style="D", nproc=3, data=[["--out", "data/train", "--shards", "6"]],
                cfg={"log": {"every": 2}}, overrides=["train.max_steps=2000", "eval.every=0"],
                kill=dict(rank=1, after_step=10)),
    "s11": dict(name="aim-import", style="S", nproc=2, data=TRAIN4,
                overrides=["train.max_steps=60", "log.tracker=aim"]),
    "s12": dict(name="lfs-pointer-shard", style="P", nproc=3, data=[["--out", "data/train", "--shards", "6"]],
                lfs_pointer="data/train/images_00002.npy",
                cfg={"data": {"partition": "shard"}}, overrides=["train.max_steps=60"]),
}
BY_NAME = {v["name"]: k for k, v in SCENARIOS.items()}
LONG = ("s02", "s09", "s03", "s10")  # start these first


def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict):
            merge(a.setdefault(k, {}), v)
        else:
            a[k] = v
    return a


def rand_id(n=8):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def read_base():
    import tomllib
    with open(os.path.join(HERE, "configs", "base.toml"), "rb") as f:
        return tomllib.load(f)


def make_workdir(sc):
    base = os.path.join(WORK_ROOT, rand_id())
    wd = os.path.join(base, "vit")
    os.makedirs(wd)
    for f in ("train.py", "train.sh"):
        shutil.copy2(os.path.join(HERE, f), wd)
    for d in ("vitrain", "tools"):
        shutil.copytree(os.path.join(HERE, d), os.path.join(wd, d), ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(wd, "configs"))
    cfg = read_base()
    merge(cfg, json.loads(json.dumps(PROFILE_CFG[PROFILE])))
    merge(cfg, json.loads(json.dumps(sc.get("cfg", {}))))
    with open(os.path.join(wd, "configs", "run.toml"), "w") as f:
        f.write(dump_toml(cfg))
    os.makedirs(os.path.join(wd, "tmp"))
    return base, wd


LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\n"
               "oid sha256:{oid}\nsize {size}\n")


def marked_pids(mark):
    out = []
    needle = f"G13_MARK={mark}".encode()
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


def kill_tree(procs, mark):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
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
            while time.time() - t0 < 10 and (any(p.poll() is None for p in procs) or marked_pids(mark)):
                time.sleep(0.5)


def console_file(sc):
    return {"A": "train.log", "B": "console.log", "C": "node0.log", "M": "out.log", "S": "stdout.log",
            "D": "job.out", "P": "rank0.log"}[sc["style"]]


def killer(sc, wd, mark, stop, rec):
    """Stand-in for the host's OOM killer: SIGKILL one rank once rank 0 has logged a given step."""
    k = sc["kill"]
    n = sc.get("nproc", 2)
    path = os.path.join(wd, console_file(sc))
    pid_re = re.compile(rf"\[{k['rank']}/{n}\] train\.py:\d+\] .* pid (\d+)")
    step_re = re.compile(r"\[0/\d+\] engine\.py:\d+\] step (\d+)/")
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
    cfg = "--config configs/run.toml"
    st = sc["style"]
    if st == "A":
        return [f"torchrun --nproc-per-node {n} --master-port {port} train.py {cfg} {ov} 2>&1 | tee train.log"]
    if st == "B":
        return [f"torchrun --nproc-per-node={n} --master-port={port} --log-dir logs --redirects 3 --tee 3 "
                f"train.py {cfg} {ov} > console.log 2>&1"]
    if st == "C":
        return [f"torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=vit --local-addr=127.0.0.{k + 1} "
                f"train.py {cfg} {ov} > node{k}.log 2>&1" for k in (0, 1)]
    if st == "M":
        return [f"python -m torch.distributed.run --nproc_per_node {n} --master_port {port} train.py {cfg} {ov} "
                f"> out.log 2> err.log"]
    if st == "S":
        return [f"python train.py --spawn {n} --master-port {port} {cfg} {ov} > stdout.log 2> stderr.log"]
    if st == "D":
        return [f"MASTER_PORT={port} NPROC={n} bash train.sh {ov} > job.out 2> job.err"]
    if st == "P":
        return [f"python train.py --rank {r} --world-size {n} --master-port {port} {cfg} {ov} > rank{r}.log 2>&1"
                for r in range(n)]
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
    env["G13_MARK"] = mark
    rec = {"scenario": name, "style": sc["style"], "workdir": wd, "port": port}
    t0 = time.time()
    for args in sc["data"] + VAL:
        subprocess.run([PY, "tools/make_images.py"] + args, cwd=wd, env=env, check=True, stdout=subprocess.DEVNULL)
    if sc.get("lfs_pointer"):
        p = os.path.join(wd, sc["lfs_pointer"])
        size = os.path.getsize(p)
        oid = "".join(random.choice("0123456789abcdef") for _ in range(64))
        with open(p, "w") as f:
            f.write(LFS_POINTER.format(oid=oid, size=size))
    if sc.get("fifo"):
        p = os.path.join(wd, sc["fifo"])
        os.remove(p)
        os.mkfifo(p)
    if sc.get("prep"):
        os.makedirs(os.path.join(wd, "_prep"))
        pov = " ".join(shlex.quote(o) for o in sc["prep"])
        cmd = (f"torchrun --nproc-per-node={sc.get('nproc', 2)} --master-port={port + 5} train.py "
               f"--config configs/run.toml {pov} > _prep/prep.log 2>&1")
        try:
            r = subprocess.run(["bash", "-c", cmd], cwd=wd, env=env, timeout=TIMEOUT, start_new_session=True)
            rec["prep_rc"] = r.returncode
        except subprocess.TimeoutExpired:
            rec["prep_rc"] = "timeout"
            kill_tree([], mark)
        for f in ("metrics.jsonl",):
            if os.path.exists(os.path.join(wd, f)):
                shutil.move(os.path.join(wd, f), os.path.join(wd, "_prep", f))
    cmds = commands(sc, port)
    rec["commands"] = cmds
    t1 = time.time()
    procs = []
    for i, c in enumerate(cmds):
        if i and sc["style"] == "C":
            time.sleep(3)
        procs.append(subprocess.Popen(["bash", "-c", c], cwd=wd, env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    stop = threading.Event()
    kt = None
    if sc.get("kill"):
        kt = threading.Thread(target=killer, args=(sc, wd, mark, stop, rec), daemon=True)
        kt.start()
    timed_out = False
    deadline = t1 + max(TIMEOUT, sc.get("timeout", 0))
    while any(p.poll() is None for p in procs):
        if time.time() > deadline:
            timed_out = True
            break
        time.sleep(0.5)
    stop.set()
    if kt:
        kt.join()
    kill_tree(procs, mark)
    for p in procs:
        p.wait()
    rec.update(rc=[p.returncode for p in procs], wall_s=round(time.time() - t1, 1),
               setup_s=round(t1 - t0, 1), timed_out=timed_out)
    dst = os.path.join(RESULTS, f"gpu13-{name}")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(wd, dst, ignore=shutil.ignore_patterns(
        "vitrain", "tools", "data", "checkpoints", "tmp", "_prep", "train.py", "train.sh", "configs",
        "attn_maps", "__pycache__", "*.pt", "*.npy", ".aim"))
    shutil.copytree(os.path.join(wd, "configs"), os.path.join(dst, "configs"))
    print(f"[harness] {name}: rc={rec['rc']} wall={rec['wall_s']}s timed_out={timed_out}", flush=True)
    with open(os.path.join(RESULTS, "_meta", "run_log.txt"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    if not os.environ.get("KEEP_WORK"):
        shutil.rmtree(base, ignore_errors=True)
    return rec


def run_safe(key, idx):
    try:
        return run_scenario(key, idx)
    except Exception as e:  # noqa: BLE001  keep the batch going; the failure is recorded
        rec = {"scenario": SCENARIOS[key]["name"], "harness_error": repr(e)}
        print(f"[harness] {rec['scenario']}: harness error {e!r}", flush=True)
        with open(os.path.join(RESULTS, "_meta", "run_log.txt"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        return rec


def versions():
    code = ("import sys,torch;print('python',sys.version.split()[0]);print('torch',torch.__version__);"
            "print('cuda',torch.version.cuda);print('cuda_available',torch.cuda.is_available());"
            "print('nccl',torch.cuda.nccl.version() if torch.cuda.is_available() else None);"
            "print('gpus',[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]);"
            "import numpy;print('numpy',numpy.__version__)\n"
            "try:\n import triton;print('triton',triton.__version__)\nexcept Exception as e:\n print('triton',e)")
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
    if PROFILE == "cpu" and not FORCE:
        keys = [k for k in keys if not SCENARIOS[k].get("gpu_only")]
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    versions()
    t0 = time.time()
    idx = {k: i for i, k in enumerate(SCENARIOS)}
    keys.sort(key=lambda k: k not in LONG)
    with ThreadPoolExecutor(MAX_PAR) as ex:
        recs = list(ex.map(lambda k: run_safe(k, idx[k]), keys))
    with open(os.path.join(RESULTS, "_meta", "runs.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(time.time() - t0, 1), "runs": recs}, f, indent=1)
    print(f"[harness] done in {time.time() - t0:.0f}s -> {RESULTS}", flush=True)
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        with tarfile.open(os.path.join(OUT, "gpu13_samples.tar.gz"), "w:gz") as tf:
            tf.add(RESULTS, arcname=os.path.basename(RESULTS))
        print(f"[harness] wrote {OUT}/gpu13_samples.tar.gz", flush=True)


if __name__ == "__main__":
    main()
