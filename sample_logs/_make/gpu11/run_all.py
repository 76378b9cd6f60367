#!/usr/bin/env python
"""Harness: run lmtrain failure scenarios in neutral work dirs and collect their logs.

    RESULTS=/dir [PROFILE=gpu|cpu] [OUT=/out] python run_all.py [NAME ...]
"""
import json
import os
import random
import shlex
import shutil
import signal
import string
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE = os.environ.get("PROFILE", "gpu")
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu11-results"))
OUT = os.environ.get("OUT", "")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g11runs")
TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "150" if PROFILE == "gpu" else "300"))
MAX_PAR = int(os.environ.get("MAX_PAR", "2"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29600"))
PY = sys.executable

COMMON_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
              "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "4"}

# profile settings written into configs/run.json
PROFILE_CFG = {
    "gpu": {"train": {"device": "cuda", "device_index": 0, "backend": "gloo", "precision": "bf16"}},
    "cpu": {"train": {"device": "cpu", "backend": "gloo", "precision": "fp32"},
            "model": {"d_model": 128, "n_layers": 2},
            "data": {"seq_len": 128, "micro_batch_size": 4}},
}

TRAIN = ["--out", "data/train", "--shards", "4"]
VAL = ["--out", "data/val", "--shards", "2", "--tokens-per-shard", "40000", "--seed", "7"]

# style: A tee | B torchrun log-dir | C two agents | S mp.spawn | M python -m torch.distributed.run | D train.sh
SCENARIOS = {
    "s01": dict(name="longest-doc-pad-oom", style="A", gpu_only=True, exclusive=True,
                data=[TRAIN + ["--long-doc", "1:20:150000"], VAL],
                cfg={"data": {"packing": False, "micro_batch_size": 4}, "model": {"attn_impl": "eager"}},
                overrides=["train.max_steps=30"]),
    "s02": dict(name="shard-dtype-mix", style="B", gpu_only=True,
                data=[TRAIN[:2] + ["--shards", "3"], TRAIN[:2] + ["--shards", "1", "--start", "3", "--dtype", "uint16"], VAL],
                overrides=["train.max_steps=30"], env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}),
    "s03": dict(name="token-budget-hang", style="C",
                data=[TRAIN + ["--doc-len-by-shard", "60,400,60,400"], VAL],
                cfg={"data": {"packing": False}},
                overrides=["train.max_steps=200", "train.max_tokens=16000", "train.eval_every=0"]),
    "s04": dict(name="flash-attn-missing", style="S", data=[TRAIN, VAL],
                overrides=["model.attn_impl=flash"]),
    "s05": dict(name="warmup-equals-steps", style="M", data=[TRAIN, VAL],
                overrides=["train.max_steps=12", "optim.warmup_steps=12", "train.eval_every=0"]),
    "s06": dict(name="resume-ffn-multiple", style="D", data=[TRAIN, VAL],
                prep=["train.max_steps=6", "train.save_every=6", "train.eval_every=0"],
                cfg={"model": {"ffn_multiple_of": 64}},
                overrides=["train.resume=latest", "train.max_steps=20"]),
    "s07": dict(name="eval-jsonl-last-rank", style="B", data=[TRAIN, VAL],
                overrides=["train.max_steps=30", "train.eval_every=10", "train.eval_jsonl=eval_metrics.jsonl"],
                env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}),
    "s08": dict(name="empty-shard-mmap", style="A", data=[TRAIN, VAL], truncate="data/train/shard_00003.bin",
                overrides=["train.max_steps=30"], env={"NCCL_DEBUG": "INFO"}),
    "s09": dict(name="collate-cuda-fork", style="M", gpu_only=True, data=[TRAIN, VAL],
                cfg={"data": {"collate_device": "cuda:0"}}, overrides=["train.max_steps=30"]),
    "s10": dict(name="heads-not-dividing", style="S", data=[TRAIN, VAL],
                cfg={"model": {"d_model": 384, "n_heads": 10}}, overrides=["train.max_steps=30"]),
    "s11": dict(name="local-rank-device", style="A", gpu_only=True, data=[TRAIN, VAL],
                cfg={"train": {"device_index": -1}}, overrides=["train.max_steps=30"],
                env={"NCCL_DEBUG": "WARN"}),
}
BY_NAME = {v["name"]: k for k, v in SCENARIOS.items()}


def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict):
            merge(a.setdefault(k, {}), v)
        else:
            a[k] = v
    return a


def rand_id(n=8):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def make_workdir(sc):
    base = os.path.join(WORK_ROOT, rand_id())
    wd = os.path.join(base, "lmtrain")
    os.makedirs(wd)
    for f in ("train.py", "train.sh"):
        shutil.copy2(os.path.join(HERE, f), wd)
    for d in ("lmtrain", "tools"):
        shutil.copytree(os.path.join(HERE, d), os.path.join(wd, d), ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(wd, "configs"))
    with open(os.path.join(HERE, "configs", "base.json")) as f:
        cfg = json.load(f)
    merge(cfg, json.loads(json.dumps(PROFILE_CFG[PROFILE])))
    merge(cfg, sc.get("cfg", {}))
    with open(os.path.join(wd, "configs", "run.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    os.makedirs(os.path.join(wd, "tmp"))
    return base, wd


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


def marked_pids(mark):
    out = []
    needle = f"G11_MARK={mark}".encode()
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


def commands(sc, port):
    n = sc.get("nproc", 2)
    ov = " ".join(shlex.quote(o) for o in sc.get("overrides", []))
    st = sc["style"]
    if st == "A":
        return [f"torchrun --nproc-per-node={n} --master-port={port} train.py --config configs/run.json {ov} 2>&1 | tee train.log"]
    if st == "B":
        return [f"torchrun --nproc-per-node={n} --master-port={port} --log-dir logs --redirects 3 --tee 3 "
                f"train.py --config configs/run.json {ov} > console.log 2>&1"]
    if st == "C":
        return [f"torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=train --local-addr=127.0.0.{k + 1} "
                f"train.py --config configs/run.json {ov} > node{k}.log 2>&1" for k in (0, 1)]
    if st == "S":
        return [f"MASTER_PORT={port} python train.py --spawn {n} --config configs/run.json {ov} > stdout.log 2> stderr.log"]
    if st == "M":
        return [f"python -m torch.distributed.run --nproc_per_node {n} --master_port {port} train.py "
                f"--config configs/run.json {ov} > train.out 2> train.err"]
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
    env["G11_MARK"] = mark
    rec = {"scenario": name, "workdir": wd, "port": port}
    t0 = time.time()
    for args in sc["data"]:
        subprocess.run([PY, "tools/make_shards.py"] + args, cwd=wd, env=env, check=True, stdout=subprocess.DEVNULL)
    if sc.get("truncate"):
        open(os.path.join(wd, sc["truncate"]), "w").close()
    if sc.get("prep"):
        os.makedirs(os.path.join(wd, "_prep"))
        pov = " ".join(sc["prep"])
        with open(os.path.join(wd, "configs", "run.json")) as f:
            cur = json.load(f)
        # the prep run used the config as it was before the change
        with open(os.path.join(HERE, "configs", "base.json")) as f:
            old = merge(json.load(f), json.loads(json.dumps(PROFILE_CFG[PROFILE])))
        with open(os.path.join(wd, "configs", "run.json"), "w") as f:
            json.dump(old, f, indent=2)
        cmd = f"torchrun --nproc-per-node=2 --master-port={port + 5} train.py --config configs/run.json {pov} > _prep/prep.log 2>&1"
        r = subprocess.run(["bash", "-c", cmd], cwd=wd, env=env, timeout=TIMEOUT)
        rec["prep_rc"] = r.returncode
        with open(os.path.join(wd, "configs", "run.json"), "w") as f:
            json.dump(cur, f, indent=2)
    cmds = commands(sc, port)
    rec["commands"] = cmds
    t1 = time.time()
    procs = []
    for i, c in enumerate(cmds):
        if i:
            time.sleep(3)
        procs.append(subprocess.Popen(["bash", "-c", c], cwd=wd, env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    timed_out = False
    deadline = t1 + TIMEOUT
    while any(p.poll() is None for p in procs):
        if time.time() > deadline:
            timed_out = True
            break
        time.sleep(0.5)
    for p in procs:
        kill_tree(p, mark)
    for p in procs:
        p.wait()
    rec.update(rc=[p.returncode for p in procs], wall_s=round(time.time() - t1, 1),
               setup_s=round(t1 - t0, 1), timed_out=timed_out)
    dst = os.path.join(RESULTS, f"gpu11-{name}")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(wd, dst, ignore=shutil.ignore_patterns(
        "lmtrain", "tools", "data", "checkpoints", "tmp", "_prep", "train.py", "train.sh", "configs", "__pycache__", "*.pt"))
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
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True).stdout
    try:
        out += "\n" + subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except Exception as e:  # noqa: BLE001
        out += f"\nnvidia-smi: {e}\n"
    with open(os.path.join(RESULTS, "_meta", "versions.txt"), "w") as f:
        f.write(f"profile {PROFILE}\n" + out)


def main():
    names = sys.argv[1:]
    keys = [BY_NAME[n] for n in names] if names else list(SCENARIOS)
    if PROFILE == "cpu" and not os.environ.get("G11_FORCE"):
        keys = [k for k in keys if not SCENARIOS[k].get("gpu_only")]
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    versions()
    t0 = time.time()
    idx = {k: i for i, k in enumerate(SCENARIOS)}
    excl = [k for k in keys if SCENARIOS[k].get("exclusive")]
    rest = [k for k in keys if not SCENARIOS[k].get("exclusive")]
    rest.sort(key=lambda k: SCENARIOS[k]["style"] != "C")  # long ones first
    recs = [run_scenario(k, idx[k]) for k in excl]
    with ThreadPoolExecutor(MAX_PAR) as ex:
        recs += list(ex.map(lambda k: run_scenario(k, idx[k]), rest))
    with open(os.path.join(RESULTS, "_meta", "runs.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(time.time() - t0, 1), "runs": recs}, f, indent=1)
    print(f"[harness] done in {time.time() - t0:.0f}s -> {RESULTS}")
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        with tarfile.open(os.path.join(OUT, "gpu11_samples.tar.gz"), "w:gz") as tf:
            tf.add(RESULTS, arcname=os.path.basename(RESULTS))
        print(f"[harness] wrote {OUT}/gpu11_samples.tar.gz")


if __name__ == "__main__":
    main()
