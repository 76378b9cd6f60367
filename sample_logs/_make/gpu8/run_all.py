#!/usr/bin/env python
"""Harness for the gpu8 scenarios (see README.md). Only the standard library is used here;
the jobs need torch + numpy."""
from __future__ import annotations

import json
import os
import random
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
CPU = PROFILE == "cpu"
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu8-results"))
OUT = os.environ.get("OUT")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g8runs")
BASE_PORT = int(os.environ.get("BASE_PORT", "29600"))
MAX_PAR = int(os.environ.get("MAX_PAR", "2" if CPU else "6"))
SCEN_TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "300" if CPU else "170"))
PY = sys.executable
CODE = ["train.py", "ditlite", "configs", "tools"]
CFG = "configs/dit_s2.yaml"
FIXED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# smaller per-step work on CPU; visible only as ordinary values in the config dump
CPU_SETS = ["train.precision=fp32", "train.batch_size=8", "data.pin_memory=false"]

# --------------------------------------------------------------------------------------------------
# scenario setups (run inside the work dir before the launch)

def _py(wd, code):
    subprocess.run([PY, "-c", code], cwd=wd, check=True)


def setup_sixteen_channel_latents(wd):
    shutil.rmtree(os.path.join(wd, "data/latents/train"))
    subprocess.run([PY, "tools/make_latents.py", "--out", "data/latents/train", "--shards", "8", "--per-shard", "128",
                    "--channels", "16"], cwd=wd, check=True, stdout=subprocess.DEVNULL)


def setup_object_labels_shard(wd):
    # shard 3 was re-exported from a dataframe whose label column had missing values
    _py(wd, "import numpy as np\n"
            "p='data/latents/train/shard-00003.npz'\n"
            "z=np.load(p); lat=z['latents']; lab=z['labels']\n"
            "obj=np.array([int(v) if i % 13 else None for i, v in enumerate(lab)], dtype=object)\n"
            "np.savez(p, latents=lat, labels=obj)\n")


def setup_interrupted_save(wd, env):
    sets = ["train.max_steps=10", "checkpoint.every=5"] + (CPU_SETS if CPU else [])
    cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={env['_PORT']}", "train.py",
           "--config", CFG] + sum([["--set", s] for s in sets], [])
    os.makedirs(os.path.join(wd, "_prep"), exist_ok=True)
    with open(os.path.join(wd, "_prep/prep.log"), "w") as f:
        subprocess.run(cmd, cwd=wd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=240, check=True)
    # the next save was cut short by preemption: only model.pt got written
    os.makedirs(os.path.join(wd, "checkpoints/step_000015"))
    shutil.copy(os.path.join(wd, "checkpoints/step_000010/model.pt"), os.path.join(wd, "checkpoints/step_000015/model.pt"))


# --------------------------------------------------------------------------------------------------
# scenarios: style, --set overrides, env, per-node shell prefix (style C), flags

SCENARIOS = {
    "preview-4k-eager-attention-oom": dict(
        style="B", gpu_only=True, exclusive=True,
        sets=["model.attn_impl=eager", "sample.every=10", "sample.resolution=4096", "sample.num=16",
              "train.max_steps=200"]),
    "sixteen-channel-latents": dict(
        style="A", setup=setup_sixteen_channel_latents, sets=["train.max_steps=200"]),
    "preview-decode-needs-diffusers": dict(
        style="F", sets=["sample.every=10", "sample.decode=true", "sample.steps=10", "train.max_steps=200"]),
    "nccl-algo-nvls-copied-env": dict(
        style="D", gpu_only=True, env={"NCCL_ALGO": "NVLS", "NCCL_DEBUG": "WARN"}, sets=["train.max_steps=200"]),
    "fd-50k-samples-on-rank0": dict(
        style="A", env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
        sets=["eval.every=10", "eval.fd_num_samples=50000", "eval.fd_batch_size=256", "eval.fd_steps=250",
              "train.max_steps=200"]),
    "stratified-timestep-off-by-one": dict(
        style="B", env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
        sets=["diffusion.timestep_sampling=stratified", "train.max_steps=200"]),
    "node1-cpu-time-ulimit": dict(
        style="C", node_prefix={1: "ulimit -S -t 45; "}, timeout=230 if not CPU else 300,
        sets=["train.max_steps=100000"]),
    "object-array-labels-shard": dict(
        style="E", setup=setup_object_labels_shard, sets=["train.max_steps=200"]),
    "resume-interrupted-save": dict(
        style="D", setup_env=setup_interrupted_save, sets=["checkpoint.resume=latest", "checkpoint.every=5",
                                                           "train.max_steps=60"]),
    "bucket-sampler-drop-last": dict(
        style="A", sets=["data.bucket_by_resolution=true", "train.max_steps=200"]),
    "preview-res-not-multiple-of-patch": dict(
        style="C", sets=["sample.every=10", "sample.resolution=120", "sample.steps=10", "train.max_steps=200"]),
    "node1-nofile-exact-resume-keys": dict(
        style="C", node_prefix={1: "ulimit -n %d; " % (512 if CPU else 1024)}, timeout=230 if not CPU else 300,
        sets=["checkpoint.exact_resume=true", "checkpoint.every=100", "data.pin_memory=false", "train.max_steps=400"]),
    "best-ckpt-metric-rank0-only": dict(
        style="B", env={"TORCH_DISTRIBUTED_DEBUG": "INFO"},
        sets=["eval.every=10", "eval.fd_num_samples=64", "eval.fd_batch_size=64", "eval.fd_steps=4",
              "checkpoint.save_best=fd", "train.max_steps=200"]),
}


def _rand(n=8):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def prepare_data(root):
    data = os.path.join(root, "_data")
    if not os.path.isdir(data):
        tmp = data + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([PY, os.path.join(HERE, "tools/make_latents.py"), "--out", os.path.join(tmp, "latents/train"),
                        "--shards", "8", "--per-shard", "128"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PY, os.path.join(HERE, "tools/make_latents.py"), "--out", os.path.join(tmp, "latents/val"),
                        "--shards", "2", "--per-shard", "64", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        os.rename(tmp, data)
    return data


def make_workdir(data):
    wd = os.path.join(WORK_ROOT, _rand(), "dit")
    os.makedirs(wd)
    for c in CODE:
        src = os.path.join(HERE, c)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(wd, c),
                                                                   **({"ignore": shutil.ignore_patterns("__pycache__")} if os.path.isdir(src) else {}))
    shutil.copytree(data, os.path.join(wd, "data"))
    os.makedirs(os.path.join(wd, "tmp"))
    return wd


def commands(name, sc, port):
    sets = sc.get("sets", []) + (CPU_SETS if CPU else [])
    args = f"--config {CFG} " + " ".join(f"--set {s}" for s in sets)
    st = sc["style"]
    if st == "A":
        return [("torchrun --nproc-per-node=2 --master-port=%d train.py %s 2>&1 | tee train.log" % (port, args), None)]
    if st == "B":
        return [("torchrun --nproc-per-node=2 --master-port=%d --log-dir logs --redirects 3 --tee 3 train.py %s"
                 " > console.log 2>&1" % (port, args), None)]
    if st == "C":
        out = []
        for k in (0, 1):
            pre = sc.get("node_prefix", {}).get(k, "")
            out.append((f"{pre}torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                        f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=dit --local-addr=127.0.0.{k + 1} "
                        f"train.py {args} > node{k}.log 2>&1", k))
        return out
    if st == "D":
        return [("torchrun --nproc-per-node=2 --master-port=%d train.py %s > train.out 2> train.err" % (port, args), None)]
    if st == "E":
        return [("MASTER_PORT=%d python train.py %s --spawn 2 > train.log 2>&1" % (port, args), None)]
    if st == "F":
        return [("python -m torch.distributed.run --nproc_per_node 2 --master_port %d train.py %s 2>&1 | tee output.log"
                 % (port, args), None)]
    raise ValueError(st)


def _procs_with_tag(tag):
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if f"G8_TAG={tag}".encode() in f.read().split(b"\0"):
                    pids.append(int(p))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def kill_tree(procs, tag):
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 2)):
        for pr in procs:
            try:
                os.killpg(pr.pid, sig)
            except ProcessLookupError:
                pass
        for pid in _procs_with_tag(tag):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        t0 = time.time()
        while time.time() - t0 < wait and (_procs_with_tag(tag) or any(p.poll() is None for p in procs)):
            time.sleep(0.5)


def run_scenario(name, idx, data):
    sc = SCENARIOS[name]
    port = BASE_PORT + 10 * idx
    wd = make_workdir(data)
    tag = _rand(12)
    env = dict(os.environ)
    env.update(FIXED_ENV)
    env.update({"G8_TAG": tag, "TMPDIR": os.path.join(wd, "tmp"), "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.pop("RESULTS", None)
    env.pop("OUT", None)
    if CPU:
        env.update({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    env.update(sc.get("env", {}))
    rec = {"scenario": name, "workdir": wd, "style": sc["style"], "port": port, "start": time.time()}
    try:
        if "setup" in sc:
            sc["setup"](wd)
        if "setup_env" in sc:
            e2 = dict(env)
            e2["_PORT"] = str(port + 5)
            sc["setup_env"](wd, e2)
    except Exception as e:  # noqa
        rec.update(setup_error=repr(e))
    snapshot = set()
    for root, dirs, files in os.walk(wd):
        for f in files:
            snapshot.add(os.path.relpath(os.path.join(root, f), wd))
    procs, cmds = [], commands(name, sc, port)
    rec["commands"] = [c for c, _ in cmds]
    t0 = time.time()
    for cmd, node in cmds:
        e = dict(env)
        if node is not None and not CPU:
            e["CUDA_VISIBLE_DEVICES"] = str(node)
        if node == 1:
            time.sleep(3)
        procs.append(subprocess.Popen(["bash", "-c", "set -o pipefail; ulimit -c 0; " + cmd], cwd=wd, env=e,
                                      start_new_session=True, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    timeout = sc.get("timeout", SCEN_TIMEOUT)
    timed_out = False
    while any(p.poll() is None for p in procs):
        if time.time() - t0 > timeout:
            timed_out = True
            break
        time.sleep(1)
    kill_tree(procs, tag)
    rec.update(rc=[p.returncode for p in procs], wall_s=round(time.time() - t0, 1), timed_out=timed_out)
    dest = os.path.join(RESULTS, f"gpu8-{name}")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for root, dirs, files in os.walk(wd):
        rel_root = os.path.relpath(root, wd)
        top = rel_root.split(os.sep)[0]
        if top in ("checkpoints", "samples", "tmp", "_prep", "data") or "__pycache__" in rel_root:
            continue
        for f in files:
            rel = os.path.normpath(os.path.join(rel_root, f))
            if rel in snapshot:
                continue
            os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
            shutil.copy2(os.path.join(root, f), os.path.join(dest, rel))
    print(f"[{time.strftime('%H:%M:%S')}] {name}: rc={rec['rc']} wall={rec['wall_s']}s timed_out={timed_out}",
          flush=True)
    return rec


def versions(meta):
    lines = [f"profile: {PROFILE}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]
    code = ("import sys, torch, numpy; print('python', sys.version.split()[0]); print('torch', torch.__version__);"
            "print('cuda', torch.version.cuda); print('numpy', numpy.__version__);"
            "print('nccl', '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None);"
            "print('gpus', [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])")
    try:
        lines.append(subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120).stdout)
    except Exception as e:  # noqa
        lines.append(f"version probe failed: {e!r}")
    try:
        lines.append(subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout)
    except Exception as e:  # noqa
        lines.append(f"nvidia-smi: {e!r}")
    with open(os.path.join(meta, "versions.txt"), "w") as f:
        f.write("\n".join(lines))


def main():
    names = sys.argv[1:] or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            sys.exit(f"unknown scenario {n}; known: {', '.join(SCENARIOS)}")
    if CPU:
        names = [n for n in names if not SCENARIOS[n].get("gpu_only")]
    os.makedirs(RESULTS, exist_ok=True)
    meta = os.path.join(RESULTS, "_meta")
    os.makedirs(meta, exist_ok=True)
    os.makedirs(WORK_ROOT, exist_ok=True)
    t_all = time.time()
    versions(meta)
    data = prepare_data(WORK_ROOT)
    index = {n: i for i, n in enumerate(SCENARIOS)}
    excl = [n for n in names if SCENARIOS[n].get("exclusive")]
    rest = [n for n in names if not SCENARIOS[n].get("exclusive")]
    rest.sort(key=lambda n: -SCENARIOS[n].get("timeout", 0))  # longest first
    recs = []
    for n in excl:
        recs.append(run_scenario(n, index[n], data))
    with ThreadPoolExecutor(MAX_PAR) as ex:
        futs = []
        for n in rest:
            futs.append(ex.submit(run_scenario, n, index[n], data))
            time.sleep(2)
        for f in futs:
            recs.append(f.result())
    with open(os.path.join(meta, "run_log.txt"), "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(meta, "runs.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(time.time() - t_all, 1), "runs": recs}, f, indent=1)
    print(f"all done in {time.time() - t_all:.0f}s -> {RESULTS}")
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        with tarfile.open(os.path.join(OUT, "gpu8_samples.tar.gz"), "w:gz") as t:
            t.add(RESULTS, arcname=os.path.basename(RESULTS))
        print(f"wrote {os.path.join(OUT, 'gpu8_samples.tar.gz')}")


if __name__ == "__main__":
    main()
