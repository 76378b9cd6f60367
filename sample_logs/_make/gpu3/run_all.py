#!/usr/bin/env python3
"""Run the failure scenarios of the gpu3 generator and collect their logs.

    RESULTS=/some/dir python3 run_all.py [SCENARIO ...]
    PROFILE=cpu RESULTS=/tmp/gpu3-cpu python3 run_all.py      # gloo/CPU subset

Each scenario runs in a fresh work directory under /tmp (neutral name), with
the trainer sources copied in.  Whatever the job wrote as logs (console files,
torchrun --log-dir, the trainer's logs/rankN.log) is copied unchanged to
$RESULTS/gpu3-<scenario>/.  The scenario name and its settings are never
passed to the job in a way that would be printed.

Environment knobs:
    RESULTS     output folder (required)
    PROFILE     gpu (default) or cpu
    OUT         if set, $RESULTS is packed into $OUT/gpu3_samples.tar.gz
    MAX_PAR     scenarios run concurrently (default 4 on gpu, 2 on cpu)
    TIMEOUT     per-phase wall-clock limit in seconds (default 180)
    KEEP_WORK   keep the /tmp work directories
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["trainer.py", "gpt_model.py", "parallel.py", "data.py", "checkpointing.py"]

# every process of every scenario gets these
BASE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    # after a collective timeout the NCCL watchdog sleeps 4x this (default 15 s -> 60 s) before
    # tearing the process down; shorten it so hang scenarios end ~80 s after the hang starts
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "5000",
}

SMALL = [
    "--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "4",
    "--seq-length", "128", "--vocab-size", "4096",
    "--micro-batch-size", "4", "--global-batch-size", "8",
    "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "5",
    "--distributed-timeout-seconds", "60", "--log-interval", "1",
]

MEDIUM = [
    "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8",
    "--seq-length", "256", "--vocab-size", "8192",
    "--micro-batch-size", "4", "--global-batch-size", "16",
    "--lr", "6e-4", "--min-lr", "6e-5", "--lr-warmup-iters", "10",
    "--distributed-timeout-seconds", "60", "--log-interval", "2",
]

# launch styles
#   tee       : torchrun --nproc-per-node=2 ... 2>&1 | tee train.log
#   logdir    : torchrun ... --log-dir torchrun_logs --redirects 3 --tee 3 > console.log 2>&1
#   multinode : two torchrun agents (--nnodes=2 --nproc-per-node=1, c10d rendezvous) -> node0.log, node1.log
#   spawn     : python3 trainer.py --launcher spawn ... 2>&1 | tee run.log
#   ranklogs  : torchrun ... --log-dir logs (trainer's own logs/rank{R}.log) > train.out 2>&1
SCENARIOS = {
    "nccl_bad_ifname": dict(
        launch="multinode", gpu_only=True,
        env={"NCCL_SOCKET_IFNAME": "hsn0", "NCCL_DEBUG": "WARN"},
        args=SMALL + ["--train-iters", "60", "--eval-interval", "20"],
    ),
    "nccl_duplicate_gpu": dict(
        launch="spawn", gpu_only=True,
        env={"CUDA_VISIBLE_DEVICES": "0"},
        args=["--nproc-per-node", "2"] + MEDIUM + ["--train-iters", "60", "--eval-interval", "20"],
    ),
    "oom_optimizer_step": dict(
        launch="tee", gpu_only=True, exclusive=True,
        env={},
        args=["--num-layers", "10", "--hidden-size", "8192", "--num-attention-heads", "64",
              "--seq-length", "256", "--vocab-size", "32000",
              "--micro-batch-size", "1", "--global-batch-size", "2",
              "--lr", "1.5e-4", "--min-lr", "1.5e-5", "--lr-warmup-iters", "100",
              "--adam-fused", "--ema-decay", "0.9999", "--ddp-bucket-size-mb", "100",
              "--distributed-timeout-seconds", "60", "--log-interval", "1",
              "--train-iters", "500", "--eval-interval", "100", "--num-workers", "1"],
    ),
    "ce_pad_label_assert": dict(
        launch="logdir", gpu_only=False, cpu_note="CPU raises IndexError instead of the device-side assert",
        env={},
        args=SMALL + ["--no-packing", "--max-seq-length", "128", "--pad-token-id", "-1",
                      "--mock-doc-len-median", "600", "--mock-doc-len-sigma", "0.6", "--data-seed", "62",
                      "--train-iters", "60", "--eval-interval", "25"],
    ),
    "straggler_eval": dict(
        launch="ranklogs", gpu_only=False,
        env={},
        args=SMALL + ["--train-iters", "200", "--eval-interval", "10", "--eval-main-process-only",
                      "--eval-iters", "-1", "--val-samples", "5000000", "--eval-micro-batch-size", "8"],
    ),
    "uneven_shards_early_exit": dict(
        launch="ranklogs", gpu_only=False,
        env={},
        args=SMALL + ["--train-epochs", "1", "--data-sharding", "document", "--mock-num-docs", "200",
                      "--data-seed", "42", "--eval-interval", "25"],
    ),
    "bf16_rope_dtype": dict(
        launch="tee", gpu_only=False,
        env={},
        args=SMALL + ["--no-packing", "--params-dtype", "bf16", "--max-seq-length", "256",
                      "--mock-doc-len-median", "40", "--mock-doc-len-sigma", "0.5", "--data-seed", "73",
                      "--train-iters", "100", "--eval-interval", "50"],
    ),
    "compile_eval_fullgraph": dict(
        launch="logdir", gpu_only=False,
        env={},
        args=MEDIUM + ["--train-iters", "100", "--eval-interval", "10", "--eval-iters", "20",
                       "--eval-main-process-only", "--compile-eval", "--compile-mode", "reduce-overhead"],
    ),
    "dcp_resume_changed_model": dict(
        launch="tee", gpu_only=False,
        env={},
        pre=[dict(args=MEDIUM + ["--data-parallel-wrapper", "fsdp2", "--ckpt-format", "torch_dist",
                                 "--save", "checkpoints", "--save-interval", "10", "--train-iters", "10",
                                 "--eval-interval", "10"])],
        args=["--num-layers", "6"] + MEDIUM[2:] + ["--data-parallel-wrapper", "fsdp2",
                                                   "--ckpt-format", "torch_dist", "--save", "checkpoints",
                                                   "--load", "checkpoints", "--save-interval", "10",
                                                   "--train-iters", "40", "--eval-interval", "10"],
    ),
    "tp_not_divisible": dict(
        launch="spawn", gpu_only=False,
        env={},
        args=["--nproc-per-node", "2", "--tensor-model-parallel-size", "2",
              "--num-layers", "4", "--hidden-size", "384", "--num-attention-heads", "12",
              "--num-query-groups", "3", "--seq-length", "256", "--vocab-size", "8192",
              "--micro-batch-size", "4", "--global-batch-size", "8", "--swiglu",
              "--distributed-timeout-seconds", "60", "--train-iters", "100", "--eval-interval", "50"],
    ),
    "tp_allreduce_seq_mismatch": dict(
        launch="multinode", gpu_only=False,
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        args=["--tensor-model-parallel-size", "2"] + SMALL + [
            "--no-packing", "--max-seq-length", "256", "--mock-doc-len-median", "60",
            "--mock-doc-len-sigma", "0.5", "--train-iters", "50", "--eval-interval", "25"],
    ),
    "async_ckpt_pickle": dict(
        launch="multinode", gpu_only=False,
        env={},
        args=SMALL + ["--save", "checkpoints", "--save-interval", "8", "--async-save",
                      "--metrics-jsonl", "metrics.jsonl", "--train-iters", "60", "--eval-interval", "20"],
    ),
    "dataloader_worker_bus_error": dict(
        launch="logdir", gpu_only=False,
        env={},
        pre=[dict(args=SMALL + ["--data-cache-dir", "{shm}", "--mock-num-docs", "40000",
                                "--train-iters", "5", "--eval-interval", "0"])],
        args=SMALL + ["--data-cache-dir", "{shm}", "--mock-num-docs", "4000",
                      "--train-iters", "100", "--eval-interval", "50"],
    ),
    "host_sigkill_loading": dict(
        launch="spawn", gpu_only=False, rss_kill_gib=4.0,
        env={},
        args=["--nproc-per-node", "2"] + MEDIUM + ["--data-impl", "preload", "--mock-num-docs", "3000000",
                                                   "--train-iters", "200", "--eval-interval", "50"],
    ),
}

CONSOLE_FILES = ("train.log", "console.log", "node0.log", "node1.log", "run.log", "train.out")
LOG_DIRS = ("torchrun_logs", "logs")


# -----------------------------------------------------------------------------
# process tree helpers
# -----------------------------------------------------------------------------
def _children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def descendants(pid):
    kids = _children_map()
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        for c in kids.get(p, []):
            out.append(c)
            stack.append(c)
    return out


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def procs_in_dir(workdir):
    """Processes whose cwd is the scenario work dir (catches orphans re-parented away)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % d)
        except OSError:
            continue
        if cwd == workdir or cwd.startswith(workdir + "/"):
            out.append(int(d))
    return out


def kill_tree(root_pid, workdir=None):
    pids = descendants(root_pid) + [root_pid]
    if workdir:
        pids += [p for p in procs_in_dir(workdir) if p not in pids]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        time.sleep(3 if sig == signal.SIGTERM else 0)
        pids = [p for p in pids if os.path.exists("/proc/%d" % p)]


# -----------------------------------------------------------------------------
# command construction
# -----------------------------------------------------------------------------
def _q(args):
    return " ".join(shlex.quote(a) for a in args)


# the console script is normally on PATH next to python3; fall back to the module
TORCHRUN = "torchrun" if shutil.which("torchrun") else "python3 -m torch.distributed.run"


def build_command(launch, args, port, rdzv_id, profile="gpu"):
    if launch == "tee":
        return "set -o pipefail; " + TORCHRUN + " --nproc-per-node=2 --master-port={p} trainer.py {a} 2>&1 | tee train.log".format(
            p=port, a=_q(args))
    if launch == "logdir":
        return (TORCHRUN + " --nproc-per-node=2 --master-port={p} --log-dir torchrun_logs --redirects 3 --tee 3 "
                "trainer.py {a} > console.log 2>&1").format(p=port, a=_q(args))
    if launch == "ranklogs":
        return TORCHRUN + " --nproc-per-node=2 --master-port={p} trainer.py {a} --log-dir logs > train.out 2>&1".format(
            p=port, a=_q(args))
    if launch == "spawn":
        return ("set -o pipefail; python3 trainer.py --launcher spawn --master-port {p} {a} 2>&1 | tee run.log").format(
            p=port, a=_q(args))
    if launch == "multinode":
        # each simulated node owns one GPU, as on two real single-GPU nodes
        agent = ("CUDA_VISIBLE_DEVICES={k} " + TORCHRUN + " --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
                 "--rdzv-endpoint=127.0.0.1:{p} --rdzv-id={rid} trainer.py {a} > node{k}.log 2>&1")
        cmd = ("{a0} &\nP0=$!\nsleep 2\n{a1} &\nP1=$!\n"
                "wait $P0; R0=$?\nwait $P1; R1=$?\n"
                "if [ $R0 -ne 0 ]; then exit $R0; fi; exit $R1\n").format(
            a0=agent.format(k=0, p=port, rid=rdzv_id, a=_q(args)),
            a1=agent.format(k=1, p=port, rid=rdzv_id, a=_q(args)))
        if profile == "cpu":
            cmd = cmd.replace("CUDA_VISIBLE_DEVICES=0 ", "").replace("CUDA_VISIBLE_DEVICES=1 ", "")
        return cmd
    raise ValueError(launch)


# -----------------------------------------------------------------------------
# running
# -----------------------------------------------------------------------------
_PRINT_LOCK = threading.Lock()


def say(msg):
    with _PRINT_LOCK:
        print("[run_all %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def run_phase(cmd, cwd, env, timeout, rss_kill_gib=None):
    t0 = time.time()
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    killed_for_rss = None
    timed_out = False
    while True:
        try:
            rc = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if rss_kill_gib is not None and killed_for_rss is None:
            procs = descendants(proc.pid)
            if procs:
                biggest = max(procs, key=rss_bytes)
                if rss_bytes(biggest) > rss_kill_gib * (1 << 30):
                    # behave like the kernel OOM killer of a memory-limited job
                    try:
                        os.kill(biggest, signal.SIGKILL)
                        killed_for_rss = biggest
                    except ProcessLookupError:
                        pass
        if time.time() - t0 > timeout:
            timed_out = True
            kill_tree(proc.pid, cwd)
            rc = proc.wait()
            break
    # make sure nothing of the job is left behind
    time.sleep(1)
    left = descendants(proc.pid) + procs_in_dir(cwd)
    if left:
        kill_tree(proc.pid, cwd)
    return rc, time.time() - t0, timed_out, killed_for_rss


def run_scenario(name, spec, index, profile, results, timeout):
    workdir = tempfile.mkdtemp(prefix="lmrun_", dir="/tmp")
    shm = None
    for f in SOURCES:
        shutil.copy2(os.path.join(HERE, f), os.path.join(workdir, f))
    env = dict(os.environ)
    env.update(BASE_ENV)
    env.update(spec.get("env", {}))
    env.pop("RESULTS", None)
    env.pop("OUT", None)
    env.pop("PROFILE", None)
    port = 29400 + 10 * index
    record = {"scenario": name, "launch": spec["launch"], "phases": []}

    def fill(args):
        nonlocal shm
        out = []
        for a in args:
            if "{shm}" in a:
                if shm is None:
                    shm = "/dev/shm/lmcache_" + uuid.uuid4().hex[:8]
                a = a.replace("{shm}", shm)
            out.append(a)
        if profile == "cpu":
            out += ["--device", "cpu"]
        return out

    try:
        for i, pre in enumerate(spec.get("pre", [])):
            os.makedirs(os.path.join(workdir, "earlier_run"), exist_ok=True)
            cmd = ("set -o pipefail; " + TORCHRUN + " --nproc-per-node=2 --master-port={p} trainer.py {a} 2>&1 "
                   "| tee earlier_run/train.log").format(p=port + 1 + i, a=_q(fill(pre["args"])))
            say("%s: earlier run %d" % (name, i + 1))
            rc, wall, to, _ = run_phase(cmd, workdir, env, timeout)
            record["phases"].append({"phase": "earlier_run_%d" % (i + 1), "rc": rc, "wall_s": round(wall, 1),
                                     "timed_out": to})
        cmd = build_command(spec["launch"], fill(spec["args"]), port, "job" + uuid.uuid4().hex[:6], profile)
        say("%s: start (%s)" % (name, spec["launch"]))
        rc, wall, to, rss_killed = run_phase(cmd, workdir, env, timeout, spec.get("rss_kill_gib"))
        record.update(rc=rc, wall_s=round(wall, 1), timed_out=to)
        if rss_killed:
            record["harness_sigkill_pid"] = rss_killed
        say("%s: rc=%s wall=%.1fs%s" % (name, rc, wall, " TIMEOUT" if to else ""))

        dest = os.path.join(results, "gpu3-" + name)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.makedirs(dest)
        for f in CONSOLE_FILES:
            p = os.path.join(workdir, f)
            if os.path.isfile(p):
                shutil.copy2(p, os.path.join(dest, f))
        for d in LOG_DIRS + ("earlier_run",):
            p = os.path.join(workdir, d)
            if os.path.isdir(p):
                shutil.copytree(p, os.path.join(dest, d))
    finally:
        if shm and os.path.isdir(shm):
            shutil.rmtree(shm, ignore_errors=True)
        if not os.environ.get("KEEP_WORK"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            record["workdir"] = workdir
    return record


def write_versions(meta_dir, profile):
    lines = ["profile: %s" % profile, "date: %s" % time.strftime("%Y-%m-%d %H:%M:%S %Z")]
    cmds = [
        ["uname", "-a"],
        ["python3", "--version"],
        ["python3", "-c", "import torch, numpy; print('torch', torch.__version__); print('numpy', numpy.__version__);"
                          "print('cuda', torch.version.cuda, 'available', torch.cuda.is_available());"
                          "print('devices', torch.cuda.device_count());"
                          "print('nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"],
        ["which", "torchrun", "python3"],
        ["nproc"],
        ["free", "-g"],
        ["df", "-h", "/dev/shm", "/tmp"],
        ["nvidia-smi"],
        ["nvidia-smi", "topo", "-m"],
    ]
    for c in cmds:
        try:
            r = subprocess.run(c, capture_output=True, text=True, timeout=60)
            out = (r.stdout + r.stderr).strip()
        except Exception as e:  # noqa: BLE001
            out = "unavailable: %s" % e
        lines.append("$ " + " ".join(c))
        lines.append(out)
    with open(os.path.join(meta_dir, "versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    results = os.environ.get("RESULTS")
    if not results:
        sys.exit("set RESULTS=/some/dir")
    results = os.path.abspath(results)
    profile = os.environ.get("PROFILE", "gpu")
    timeout = float(os.environ.get("TIMEOUT", "180"))
    max_par = int(os.environ.get("MAX_PAR", "4" if profile == "gpu" else "2"))
    names = sys.argv[1:] or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            sys.exit("unknown scenario %s (known: %s)" % (n, ", ".join(SCENARIOS)))
    if profile == "cpu":
        skipped = [n for n in names if SCENARIOS[n].get("gpu_only")]
        names = [n for n in names if not SCENARIOS[n].get("gpu_only")]
        if skipped:
            say("PROFILE=cpu: skipping GPU-only scenarios: %s" % ", ".join(skipped))
    os.makedirs(results, exist_ok=True)
    meta = os.path.join(results, "_meta")
    os.makedirs(meta, exist_ok=True)
    write_versions(meta, profile)

    index = {n: i for i, n in enumerate(SCENARIOS)}
    exclusive = [n for n in names if SCENARIOS[n].get("exclusive")]
    shared = [n for n in names if not SCENARIOS[n].get("exclusive")]
    # long ones (hangs, two-phase) first so the batch finishes sooner
    slow = {"straggler_eval", "uneven_shards_early_exit", "dataloader_worker_bus_error", "async_ckpt_pickle",
            "nccl_bad_ifname", "dcp_resume_changed_model"}
    shared.sort(key=lambda n: (n not in slow, index[n]))

    records = []
    lock = threading.Lock()
    t_start = time.time()

    def do(n):
        try:
            rec = run_scenario(n, SCENARIOS[n], index[n], profile, results, timeout)
        except Exception as e:  # noqa: BLE001
            rec = {"scenario": n, "error": repr(e)}
            say("%s: harness error %r" % (n, e))
        with lock:
            records.append(rec)

    for n in exclusive:
        do(n)
    queue = list(shared)
    running = []
    while queue or running:
        running = [t for t in running if t.is_alive()]
        while queue and len(running) < max_par:
            n = queue.pop(0)
            t = threading.Thread(target=do, args=(n,), daemon=True)
            t.start()
            running.append(t)
            time.sleep(1.0)
        time.sleep(0.5)

    total = time.time() - t_start
    records.sort(key=lambda r: index[r["scenario"]])
    with open(os.path.join(meta, "run_log.json"), "w") as f:
        json.dump({"profile": profile, "total_wall_s": round(total, 1), "scenarios": records}, f, indent=2)
    with open(os.path.join(meta, "run_log.txt"), "w") as f:
        f.write("profile=%s total_wall_s=%.1f\n" % (profile, total))
        for r in records:
            f.write("%-30s launch=%-9s rc=%-5s wall_s=%-6s timed_out=%s%s\n" % (
                r["scenario"], r.get("launch", "?"), r.get("rc"), r.get("wall_s"), r.get("timed_out"),
                "" if not r.get("phases") else " earlier=" + ",".join(
                    "rc%s/%ss" % (p["rc"], p["wall_s"]) for p in r["phases"])))
    say("all done in %.1fs; results in %s" % (total, results))

    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        tgz = os.path.join(out, "gpu3_samples.tar.gz")
        subprocess.run(["tar", "czf", tgz, "-C", results, "."], check=False)
        say("packed %s" % tgz)


if __name__ == "__main__":
    main()
