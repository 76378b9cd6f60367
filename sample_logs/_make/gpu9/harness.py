#!/usr/bin/env python3
"""Runs the gpu9 scenarios. See README.md. Usage: harness.py [NAME ...]  (env: RESULTS, PROFILE, OUT, ...)"""
import gzip
import json
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE = os.environ.get("PROFILE", "gpu")
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu9-results"))
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g9runs")
SCEN_TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "170" if PROFILE == "gpu" else "240"))
MAX_PAR = int(os.environ.get("MAX_PAR", "6" if PROFILE == "gpu" else "2"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29600"))
MARK = "G9_HARNESS_TAG"
CODE = ["tinyrl", "train.py", "tools", "configs"]
T = "train.py --config configs/base.json"


# ----------------------------------------------------------------------------- data edits (prep)
def _rows(wd, shard):
    p = os.path.join(wd, "data", "prompts", f"part-{shard:05d}.jsonl.gz")
    with gzip.open(p, "rt") as f:
        return p, [json.loads(l) for l in f if l.strip()]


def _write(p, rows):
    with gzip.open(p, "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def edit_math_rows(wd):
    for s in (1, 3):
        p, rows = _rows(wd, s)
        for i in range(0, len(rows), 3):
            rows[i]["task"] = "math"
            rows[i]["answer_text"] = "\\frac{%d}{%d}" % (i + 3, i + 7)
        _write(p, rows)


def edit_code_rows(wd, test_src):
    ok = "import sys\ntoks = sys.stdin.read().split()\nsys.exit(0 if len(toks) > 3 else 1)\n"
    for s in range(4):
        p, rows = _rows(wd, s)
        for i in range(0, len(rows), 4):
            rows[i]["task"] = "code"
            rows[i]["test"] = ok
        if s == 1:
            rows[1]["task"] = "code"
            rows[1]["test"] = test_src
        _write(p, rows)


LOOP_TEST = ("import sys\ntoks = sys.stdin.read().split()\ni = 0\nfound = False\n"
             "while i < len(toks):\n    if toks[i] == '1':\n        found = True\n        break\n"
             "sys.exit(0 if found else 1)\n")
SLOW_TEST = ("import sys\ntoks = [int(t) for t in sys.stdin.read().split()]\n"
             "best = max(sum(toks[a:b]) for a in range(len(toks)) for b in range(a, len(toks) + 1)"
             " for _ in range(10 ** 6))\nsys.exit(0 if best > 0 else 1)\n")


def edit_variable_len(wd):
    import numpy as np
    rng = np.random.default_rng(7)
    for s in (1, 3):
        p, rows = _rows(wd, s)
        for r in rows:
            n = int(rng.integers(6, 30))
            r["prompt"] = rng.integers(3, 512, n).tolist()
            r["answer"] = r["prompt"][-4:]
        _write(p, rows)


def edit_drop_uid(wd):
    for s in (1, 3):
        p, rows = _rows(wd, s)
        for r in rows:
            r.pop("uid", None)
        _write(p, rows)


def edit_truncate_shard(wd):
    p = os.path.join(wd, "data", "prompts", "part-00001.jsonl.gz")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size // 2)


def edit_ddp_prefix(wd):
    import torch
    p = os.path.join(wd, "checkpoints", "sft", "policy.pt")
    sd = torch.load(p, map_location="cpu", weights_only=True)
    sd["model"] = {"module." + k: v for k, v in sd["model"].items()}
    torch.save(sd, p)


# ----------------------------------------------------------------------------- scenarios
# style: A tee | B torchrun log-dir | C two nodes | D mp.spawn | E python -m torch.distributed.run
SCENARIOS = {
    "kv-cache-oom": dict(style="A", gpu_only=True, exclusive=True,
                         args="--set rollout.prompts_per_rank=64 --set rollout.num_generations=16 "
                              "--set rollout.max_new_tokens=65536"),
    "rm-shared-backbone": dict(style="B", args="--set reward.share_backbone=true"),
    "math-verify-missing": dict(style="C", prep=edit_math_rows, args="--set reward.kinds=match,math,rm"),
    "nccl-comm-id-foreign": dict(style="A", gpu_only=True,
                                 env={"NCCL_COMM_ID": "192.0.2.17:23456", "NCCL_DEBUG": "WARN"}),
    "sandbox-loop-hang": dict(style="B", prep=lambda wd: edit_code_rows(wd, LOOP_TEST),
                              args="--set reward.kinds=match,code,rm",
                              env={"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}),
    "ref-device-offset": dict(style="E", gpu_only=True, args="--set ref.device_offset=1"),
    "pad-id-negative": dict(style="D", prep=edit_variable_len, args="--set data.pad_id=-1"),
    "sandbox-killpg": dict(style="C", prep=lambda wd: edit_code_rows(wd, SLOW_TEST),
                           args="--set reward.kinds=match,code,rm --set reward.sandbox_timeout=10",
                           env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}),
    "gz-shard-truncated": dict(style="B", prep=edit_truncate_shard, env={"NCCL_DEBUG": "WARN"}),
    "sft-init-ddp-prefix": dict(style="A", prep=edit_ddp_prefix, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}),
    "lora-rank-resume": dict(style="D", prep_run="--set train.max_steps=2 --set train.save_every=2",
                             args="--resume --set lora.r=16 --set train.max_steps=6"),
    "adamw-fused-foreach": dict(style="E", args="--set optim.fused=true --set optim.foreach=true"),
    "sample-uid-int64": dict(style="A", prep=edit_drop_uid, args="--set train.samples_every=2"),
    "fsdp2-tp-mesh": dict(style="A", args="--set parallel.layout=fsdp2 --set parallel.dp_shard=2 "
                                          "--set parallel.tp=2"),
}


def launch_cmds(style, port, extra):
    py = "python"
    if style == "A":
        return [f"torchrun --nproc-per-node=2 --master-port={port} {T} {extra} 2>&1 | tee train.log"]
    if style == "B":
        return [f"torchrun --nproc-per-node=2 --master-port={port} --log-dir logs/torchrun --redirects 3 --tee 3 "
                f"{T} {extra} > console.log 2>&1"]
    if style == "C":
        out = []
        for k in (0, 1):
            dev = f"CUDA_VISIBLE_DEVICES={k} " if PROFILE == "gpu" else ""
            delay = "sleep 3; " if k else ""
            out.append(f"{delay}{dev}torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                       f"--rdzv-endpoint=127.0.0.1:{port} --rdzv-id=grpo --local-addr=127.0.0.{k + 1} "
                       f"{T} {extra} > node{k}.log 2>&1")
        return out
    if style == "D":
        return [f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port} {py} {T} --spawn 2 {extra} > train.out 2> train.err"]
    if style == "E":
        return [f"{py} -m torch.distributed.run --nproc_per_node 2 --master_port {port} {T} {extra} "
                f"> stdout.txt 2> stderr.txt"]
    raise ValueError(style)


def marked_pids(tag):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"{MARK}={tag}".encode() in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def kill_tree(procs, tag):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
    for pid in marked_pids(tag):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.time() + 10
    while time.time() < deadline and (any(p.poll() is None for p in procs) or marked_pids(tag)):
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    for pid in marked_pids(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def snapshot(wd):
    out = {}
    for root, _, files in os.walk(wd):
        for f in files:
            p = os.path.join(root, f)
            try:
                out[os.path.relpath(p, wd)] = os.stat(p).st_mtime_ns
            except OSError:
                pass
    return out


def base_env(tag, wd):
    env = dict(os.environ)
    env.update({MARK: tag, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1", "TMPDIR": os.path.join(wd, "tmp"), "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "2"})
    for k in ("PROFILE", "RESULTS", "OUT", "WORK_ROOT", "SCEN_TIMEOUT", "MAX_PAR", "BASE_PORT"):
        env.pop(k, None)
    if PROFILE == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_scenario(name, idx, log):
    sc = SCENARIOS[name]
    tag = "".join(random.choices(string.ascii_lowercase + string.digits, k=10))
    wd = os.path.join(WORK_ROOT, tag, "grpo")
    os.makedirs(os.path.join(wd, "tmp"))
    for c in CODE:
        src = os.path.join(HERE, c)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(wd, c))
    env = base_env(tag, wd)
    port = BASE_PORT + 10 * idx
    prep_dir = os.path.join(wd, "_prep")
    os.makedirs(prep_dir)
    with open(os.path.join(prep_dir, "prep.log"), "w") as pl:
        subprocess.run([sys.executable, "tools/prepare.py"], cwd=wd, env=env, stdout=pl, stderr=subprocess.STDOUT,
                       check=True)
        if sc.get("prep"):
            sc["prep"](wd)
        if sc.get("prep_run"):
            subprocess.run(f"torchrun --nproc-per-node=2 --master-port={port + 5} {T} {sc['prep_run']}",
                           shell=True, cwd=wd, env=env, stdout=pl, stderr=subprocess.STDOUT, timeout=SCEN_TIMEOUT)
    shutil.rmtree(os.path.join(wd, "tmp"))
    os.makedirs(os.path.join(wd, "tmp"))
    before = snapshot(wd)
    senv = dict(env)
    senv.update(sc.get("env", {}))
    cmds = launch_cmds(sc["style"], port, sc.get("args", ""))
    t0 = time.time()
    procs = [subprocess.Popen(["bash", "-o", "pipefail", "-c", c], cwd=wd, env=senv, start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for c in cmds]
    timed_out = False
    while any(p.poll() is None for p in procs):
        if time.time() - t0 > SCEN_TIMEOUT:
            timed_out = True
            break
        time.sleep(0.5)
    kill_tree(procs, tag)
    wall = time.time() - t0
    rcs = [p.wait() for p in procs]
    dest = os.path.join(RESULTS, f"gpu9-{name}")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    skipped = []
    after = snapshot(wd)
    for rel, mt in sorted(after.items()):
        if rel.startswith(("tmp/", "_prep/")) or before.get(rel) == mt:
            continue
        if rel.endswith(".pt") or os.path.getsize(os.path.join(wd, rel)) > 20 * 2 ** 20:
            skipped.append(rel)
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(os.path.join(wd, rel), os.path.join(dest, rel))
    rec = dict(scenario=name, style=sc["style"], exit_codes=rcs, wall_s=round(wall, 1), timed_out=timed_out,
               workdir=wd, commands=cmds, env={k: v for k, v in sc.get("env", {}).items()},
               not_copied=skipped, profile=PROFILE)
    log(rec)
    return rec


def versions(meta):
    lines = []
    def sh(c):
        try:
            return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
        except Exception as e:  # noqa: BLE001
            return f"<{e}>"
    lines.append("python: " + sys.version.replace("\n", " "))
    lines.append(sh("python -c \"import torch,numpy;print('torch', torch.__version__, '| cuda', torch.version.cuda,"
                    " '| nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None,"
                    " '| gpus', [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],"
                    " '| numpy', numpy.__version__)\""))
    lines.append("profile: " + PROFILE)
    lines.append("uname: " + sh("uname -a"))
    lines.append("nvidia-smi:\n" + (sh("nvidia-smi") or "<not available>"))
    with open(os.path.join(meta, "versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    names = sys.argv[1:] or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            sys.exit(f"unknown scenario {n}; known: {' '.join(SCENARIOS)}")
    if PROFILE == "cpu":
        names = [n for n in names if not SCENARIOS[n].get("gpu_only")]
    meta = os.path.join(RESULTS, "_meta")
    os.makedirs(meta, exist_ok=True)
    versions(meta)
    lock = threading.Lock()
    results = []

    def log(rec):
        with lock:
            results.append(rec)
            with open(os.path.join(meta, "run_log.txt"), "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"[gpu9] {rec['scenario']:24s} rc={rec['exit_codes']} wall={rec['wall_s']}s"
                  f"{' TIMEOUT' if rec['timed_out'] else ''}", flush=True)

    order = list(SCENARIOS)
    excl = [n for n in names if SCENARIOS[n].get("exclusive")]
    rest = [n for n in names if n not in excl]
    rest.sort(key=lambda n: (SCENARIOS[n]["style"] != "C", "hang" not in n and "killpg" not in n))
    t0 = time.time()
    for n in excl:
        run_scenario(n, order.index(n), log)
    pending = list(rest)
    threads = []
    while pending or threads:
        threads = [t for t in threads if t.is_alive()]
        while pending and len(threads) < MAX_PAR:
            n = pending.pop(0)
            t = threading.Thread(target=run_scenario, args=(n, order.index(n), log))
            t.start()
            threads.append(t)
        time.sleep(0.5)
    with open(os.path.join(meta, "runs.json"), "w") as f:
        json.dump({"total_wall_s": round(time.time() - t0, 1), "runs": results}, f, indent=1)
    print(f"[gpu9] done: {len(results)} scenarios in {time.time() - t0:.0f}s -> {RESULTS}", flush=True)


if __name__ == "__main__":
    main()
