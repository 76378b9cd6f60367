#!/usr/bin/env python3
"""gpu6 harness: run failure scenarios of the sftkit code base, collect their logs.

Usage: RESULTS=dir [PROFILE=gpu|cpu] [OUT=dir] python3 harness.py [SCENARIO ...]
"""
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
PROFILE = os.environ.get("PROFILE", "gpu")
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu6-results"))
OUT = os.environ.get("OUT")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g6runs")
BASE_PORT = int(os.environ.get("BASE_PORT", "29500"))
SCEN_TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "150" if PROFILE == "gpu" else "300"))
MAX_PAR = int(os.environ.get("MAX_PAR", "6" if PROFILE == "gpu" else "4"))
PY = os.environ.get("PYTHON") or shutil.which("python") or shutil.which("python3")
TORCHRUN = shutil.which("torchrun") or "torchrun"
MARK = "_G6_JOB"  # private env marker used to find stragglers
CODE = ["sftkit", "configs", "tools", "train.py", "launch_spawn.py"]
COMMON_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
              "NVSHMEM_DISABLE_NVLS": "1", "PYTHONUNBUFFERED": "1"}


def S(name, style, config, args="", env=None, node_env=None, edits=(), setup=None, prep=None,
      cpu=True, timeout=None, wrap_timeout=45):
    return dict(name=name, style=style, config=config, args=args, env=env or {},
                node_env=node_env or [{}, {}], edits=list(edits), setup=setup, prep=prep, cpu=cpu,
                timeout=timeout, wrap_timeout=wrap_timeout)


def _empty_ext(work):
    import sysconfig
    suffix = subprocess.run([PY, "-c", "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True).stdout.strip() or sysconfig.get_config_var("EXT_SUFFIX")
    # what an interrupted `python tools/build_ops.py` leaves behind
    open(os.path.join(work, "sftkit", "ops", "_fused_adam" + suffix), "wb").close()
    os.makedirs(os.path.join(work, "build", "temp.linux-x86_64"), exist_ok=True)


SCENARIOS = [
    S("long-transcript-attn-oom", "A", "configs/chat_lora.yaml",
      "--data.max_seq_len=null --data.shuffle=false --model.attn_impl=eager --train.micro_batch_size=2",
      edits=["long-transcript"]),
    S("eval-context-longer-than-pos-table", "B", "configs/chat_full.yaml",
      "--eval.max_seq_len=1024 --eval.every=5", edits=["eval-long-odd"]),
    S("stale-shard-index", "D", "configs/pretrain_packed.yaml", "", edits=["retokenized-shard0"]),
    S("lora-fan-in-fan-out-merge", "E", "configs/chat_lora.yaml",
      "--lora.targets=[all-linear] --lora.fan_in_fan_out=true --export.merge_lora=true "
      "--train.steps=10 --eval.every=0"),
    S("fused-adam-ext-empty-so", "A", "configs/chat_lora.yaml", "--optim.fused=true", setup=_empty_ext),
    S("node1-nccl-net-ib", "C", "configs/chat_lora.yaml", "",
      node_env=[{}, {"NCCL_NET": "IB", "NCCL_DEBUG": "WARN"}], cpu=False, timeout=90),
    S("early-stop-local-metric", "B", "configs/chat_full.yaml",
      "--eval.every=5 --eval.early_stopping_patience=2 --eval.early_stopping_min_delta=0.02 "
      "--train.steps=300 --train.lr=1e-3", env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
      edits=["eval-mixed-source"]),
    S("timeout-wrapper-sigterm", "G", "configs/chat_lora.yaml", "--train.steps=100000 --eval.every=0"),
    S("zeroed-shard-header", "C", "configs/pretrain_packed.yaml", "--data.split_by=shard",
      edits=["zero-head-shard1"]),
    S("regex-backtrack-loader-timeout", "D", "configs/chat_lora.yaml",
      "--data.clean_text=true --data.timeout=20 --data.shuffle=false", edits=["ascii-banner"]),
    S("resume-weights-only-unpickle", "A", "configs/chat_lora.yaml",
      "--checkpoint.resume_from=latest --train.steps=20",
      prep="--train.steps=10 --checkpoint.every=10 --eval.every=0"),
    S("dcp-node-local-scratch", "C", "configs/chat_lora.yaml",
      "--checkpoint.format=dcp --checkpoint.dir=$LOCAL_SCRATCH/ckpt --checkpoint.resume_from=latest "
      "--train.steps=20",
      node_env=[{"LOCAL_SCRATCH": "scratch/node0"}, {"LOCAL_SCRATCH": "scratch/node1"}],
      prep="--checkpoint.format=dcp --checkpoint.dir=$LOCAL_SCRATCH/ckpt --train.steps=10 "
           "--checkpoint.every=10 --eval.every=0"),
    S("ddp-unused-mtp-adapter", "B", "configs/chat_lora.yaml",
      "--model.mtp_head=true --lora.targets=[all-linear] --train.grad_accum=2",
      env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}),
    S("spawn-missing-master-port", "F", "configs/chat_lora.yaml", ""),
    S("eval-all-labels-truncated", "E", "configs/chat_lora.yaml",
      "--eval.every=5 --data.max_seq_len=256", edits=["eval-long-context"]),
    S("gqa-kv-heads-not-divisor", "A", "configs/chat_lora.yaml", "--model.n_heads=8 --model.n_kv_heads=3",
      env={"NCCL_DEBUG": "INFO"}),
]
BY_NAME = {s["name"]: s for s in SCENARIOS}

_print_lock = threading.Lock()


def log(msg):
    with _print_lock:
        print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rand_id(n=8):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


# ------------------------------------------------------------------ commands
def commands(s, port, args, prep=False):
    """Returns a list of (shell command, extra env) - one per launcher process."""
    cfg = f"--config {s['config']}"
    tr = "train.py " + cfg + (" " + args if args else "")
    st = s["style"]
    sfx = "" if not prep else "_prep/"
    if st == "A":
        return [(f"torchrun --nproc-per-node=2 --master-addr=127.0.0.1 --master-port={port} {tr} "
                 f"2>&1 | tee {sfx}train.log", {})]
    if st == "B":
        return [(f"torchrun --nproc-per-node=2 --master-port={port} --log-dir {sfx}logs/torchrun "
                 f"--redirects 3 --tee 3 {tr} > {sfx}console.log 2>&1", {})]
    if st == "D":
        return [(f"torchrun --nproc-per-node=2 --master-port={port} {tr} "
                 f"> {sfx}train.out 2> {sfx}train.err", {})]
    if st == "E":
        return [(f"{PY} -m torch.distributed.run --nproc_per_node 2 --master_port {port} {tr} "
                 f"2>&1 | tee -a {sfx}run.log", {})]
    if st == "F":
        return [(f"{PY} launch_spawn.py --nprocs 2 {cfg} {args} > {sfx}spawn.log 2>&1", {})]
    if st == "G":
        return [(f"timeout {s['wrap_timeout']} torchrun --nproc-per-node=2 --master-port={port} {tr} "
                 f"2>&1 | tee {sfx}train.log", {})]
    if st == "C":
        out = []
        rid = rand_id(6)  # the two agents share one rdzv id
        for k in range(2):
            env = dict(s["node_env"][k])
            if PROFILE == "gpu":
                env["CUDA_VISIBLE_DEVICES"] = str(k)
            cmd = (f"{'sleep 3; ' if k else ''}torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} "
                   f"--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:{port} --rdzv-id=sft-{rid} "
                   f"--local-addr=127.0.0.{k + 1} {tr} > {sfx}node{k}.log 2>&1")
            out.append((cmd, env))
        return out
    raise ValueError(st)


# ------------------------------------------------------------------ process control
def _marked_pids(tag):
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


def kill_tree(procs, tag, grace=8):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for pid in _marked_pids(tag):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    t0 = time.time()
    while time.time() - t0 < grace and (_marked_pids(tag) or any(p.poll() is None for p in procs)):
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in _marked_pids(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def launch(cmds, work, base_env, timeout):
    tag = rand_id(12)
    procs = []
    t0 = time.time()
    for cmd, extra in cmds:
        env = dict(base_env)
        env.update(extra)
        env[MARK] = tag
        procs.append(subprocess.Popen(["bash", "-c", "set -o pipefail; " + cmd], cwd=work, env=env,
                                      start_new_session=True, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    timed_out = False
    while any(p.poll() is None for p in procs):
        if time.time() - t0 > timeout:
            timed_out = True
            break
        time.sleep(0.5)
    wall = time.time() - t0
    kill_tree(procs, tag)
    return [p.returncode for p in procs], wall, timed_out


# ------------------------------------------------------------------ one scenario
def prepare_template():
    tmpl = os.path.join(WORK_ROOT, "_template_" + rand_id())
    os.makedirs(tmpl)
    for c in CODE:
        src = os.path.join(HERE, c)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(tmpl, c))
    subprocess.run([PY, "tools/make_data.py", "--out", "data"], cwd=tmpl, check=True)
    return tmpl


def run_scenario(s, idx, tmpl):
    port = BASE_PORT + 10 * idx
    work = os.path.join(WORK_ROOT, rand_id(), "sftkit")
    shutil.copytree(tmpl, work, ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(work, "tmp"))
    for e in s["edits"]:
        subprocess.run([PY, "tools/make_data.py", "--out", "data", "--edit", e], cwd=work, check=True)
    if s["setup"]:
        s["setup"](work)
    env = dict(os.environ)
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "RESULTS", "OUT",
              "PROFILE", "SCEN_TIMEOUT", "MAX_PAR"):
        env.pop(k, None)
    env.update(COMMON_ENV)
    env["TMPDIR"] = os.path.join(work, "tmp")
    if PROFILE == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(s["env"])
    timeout = s["timeout"] or SCEN_TIMEOUT
    rec = {"scenario": s["name"], "style": s["style"], "work_dir": work, "port": port}
    if s["prep"]:
        os.makedirs(os.path.join(work, "_prep"))
        pc = commands(s, port + 5, s["prep"], prep=True)
        rcs, wall, to = launch(pc, work, env, timeout)
        rec["prep"] = {"exit_codes": rcs, "wall_s": round(wall, 1), "timed_out": to,
                       "commands": [c for c, _ in pc]}
        log(f"{s['name']}: prep rc={rcs} {wall:.0f}s")
    cmds = commands(s, port, s["args"])
    log(f"{s['name']}: start ({s['style']}) in {work}")
    rcs, wall, to = launch(cmds, work, env, timeout)
    rec.update(exit_codes=rcs, wall_s=round(wall, 1), timed_out=to,
               commands=[c for c, _ in cmds], env={k: v for k, v in s["env"].items()},
               node_env=s["node_env"] if s["style"] == "C" else None)
    log(f"{s['name']}: rc={rcs} wall={wall:.0f}s timed_out={to}")
    # copy what the job wrote (logs, error.json), unchanged
    dest = os.path.join(RESULTS, f"gpu6-{s['name']}")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name in os.listdir(work):
        src = os.path.join(work, name)
        if name.endswith((".log", ".out", ".err")) and os.path.isfile(src):
            shutil.copy2(src, dest)
    if os.path.isdir(os.path.join(work, "logs")):
        shutil.copytree(os.path.join(work, "logs"), os.path.join(dest, "logs"))
    return rec


# ------------------------------------------------------------------ meta
def versions():
    lines = []
    probe = ("import sys, platform, torch\n"
             "print('python', sys.version.replace('\\n', ' '))\n"
             "print('platform', platform.platform())\n"
             "print('torch', torch.__version__)\n"
             "print('cuda', torch.version.cuda)\n"
             "print('cuda_available', torch.cuda.is_available())\n"
             "try:\n    print('nccl', '.'.join(map(str, torch.cuda.nccl.version())))\n"
             "except Exception as e:\n    print('nccl', 'n/a', e)\n"
             "for i in range(torch.cuda.device_count()):\n"
             "    print('gpu', i, torch.cuda.get_device_name(i))\n"
             "import numpy; print('numpy', numpy.__version__)\n")
    r = subprocess.run([PY, "-c", probe], capture_output=True, text=True)
    lines.append(r.stdout + r.stderr)
    lines.append(f"profile {PROFILE}\npython_bin {PY}\ntorchrun {TORCHRUN}\n")
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        lines.append(r.stdout + r.stderr)
        r = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
        lines.append(r.stdout + r.stderr)
    return "\n".join(lines)


def main():
    names = sys.argv[1:]
    for n in names:
        if n not in BY_NAME:
            sys.exit(f"unknown scenario {n}; known: {', '.join(BY_NAME)}")
    chosen = [s for s in SCENARIOS if (not names or s["name"] in names)]
    if PROFILE == "cpu":
        skipped = [s["name"] for s in chosen if not s["cpu"]]
        chosen = [s for s in chosen if s["cpu"]]
        if skipped:
            log(f"cpu profile: skipping GPU-only {skipped}")
    os.makedirs(WORK_ROOT, exist_ok=True)
    meta = os.path.join(RESULTS, "_meta")
    os.makedirs(meta, exist_ok=True)
    with open(os.path.join(meta, "versions.txt"), "w") as f:
        f.write(versions())
    tmpl = prepare_template()
    t0 = time.time()
    # the longest ones (two-node, hang, prep+run) first
    order = sorted(chosen, key=lambda s: 0 if (s["style"] == "C" or s["prep"] or "early" in s["name"]) else 1)
    idx = {s["name"]: i for i, s in enumerate(SCENARIOS)}
    recs = []
    with ThreadPoolExecutor(MAX_PAR) as ex:
        futs = [ex.submit(run_scenario, s, idx[s["name"]], tmpl) for s in order]
        for f in futs:
            rec = f.result()
            recs.append(rec)
            with open(os.path.join(meta, "run_log.txt"), "a") as fh:
                fh.write(json.dumps(rec) + "\n")
    total = time.time() - t0
    with open(os.path.join(meta, "runs.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(total, 1), "runs": recs}, f, indent=1)
    shutil.rmtree(tmpl, ignore_errors=True)
    log(f"all done in {total:.0f}s; results in {RESULTS}")
    if OUT:
        os.makedirs(OUT, exist_ok=True)
        tgz = os.path.join(OUT, "gpu6_samples.tar.gz")
        with tarfile.open(tgz, "w:gz") as t:
            t.add(RESULTS, arcname=os.path.basename(RESULTS.rstrip("/")))
        log(f"wrote {tgz}")


if __name__ == "__main__":
    main()
