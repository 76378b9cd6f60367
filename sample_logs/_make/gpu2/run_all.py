#!/usr/bin/env python3
"""Run the gpu2 failure scenarios and collect the logs each job wrote.

    RESULTS=/some/dir python3 run_all.py [SCENARIO ...]

Environment:
  RESULTS   where to put gpu2-<scenario>/ folders and _meta/ (required)
  PROFILE   "gpu" (default) or "cpu" (gloo on CPU, only scenarios that need no CUDA)
  OUT       if set, pack RESULTS into $OUT/gpu2_samples.tar.gz
  JOBS      scenarios run at once (default 6 on gpu, 2 on cpu); "solo" scenarios always run alone
  WORK_BASE parent of the per-scenario work dirs (default /tmp)
  SCENARIO_TIMEOUT  override every scenario's wall-clock limit (seconds)
  KEEP_WORK set to keep the per-scenario work dirs (default: removed after the logs are copied)

Nothing in a job's environment or command line names the scenario: work dirs are random
(/tmp/lm-XXXXXXXX), data-damage specs live in a private dir outside the work dir, and the only
marker variable (NANOLM_JOB_TOKEN, a random hex string) exists so this script can find and kill
the job's processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CODE_FILES = ("trainer.py", "model.py", "data.py")
CODE_DIR = "nanolm"
TOKEN_VAR = "NANOLM_JOB_TOKEN"
COMMON_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
PROFILE = os.environ.get("PROFILE", "gpu").lower()
CPU = PROFILE == "cpu"
DEFAULT_TIMEOUT = 150
PORT_BASE = int(os.environ.get("PORT_BASE", "29600"))

_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def torchrun_cmd() -> str:
    return "torchrun" if shutil.which("torchrun") else "python3 -m torch.distributed.run"


# --------------------------------------------------------------------------------------
# process helpers
# --------------------------------------------------------------------------------------
def _read_environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def pids_with_token(token: str, extra: bytes | None = None) -> list[int]:
    want = f"{TOKEN_VAR}={token}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        env = _read_environ(int(d))
        if want in env and (extra is None or extra in env):
            out.append(int(d))
    return out


def kill_token(token: str, sig=signal.SIGKILL) -> int:
    n = 0
    for pid in pids_with_token(token):
        try:
            os.kill(pid, sig)
            n += 1
        except ProcessLookupError:
            pass
    return n


def wait_for_regex(path: str, pattern: str, timeout: float) -> bool:
    rx = re.compile(pattern)
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path, errors="replace") as f:
                if rx.search(f.read()):
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def wait_port_listening(port: int, timeout: float = 20) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


# --------------------------------------------------------------------------------------
# scenario context
# --------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, name: str, port: int, timeout: int):
        self.name = name
        self.port = port
        self.timeout = int(os.environ.get("SCENARIO_TIMEOUT", timeout))
        base = os.environ.get("WORK_BASE", "/tmp")
        self.work = tempfile.mkdtemp(prefix="lm-", dir=base)
        self.private = tempfile.mkdtemp(prefix="gen-", dir=base)  # specs; never given to the job
        self.token = secrets.token_hex(8)
        self.deadline = time.time() + self.timeout
        self.procs: list[subprocess.Popen] = []
        self.commands: list[str] = []
        self.rcs: list[int | None] = []
        self.timed_out = False
        self.notes: list[str] = []
        os.makedirs(os.path.join(self.work, CODE_DIR))
        for f in CODE_FILES:
            shutil.copy2(os.path.join(HERE, f), os.path.join(self.work, CODE_DIR, f))

    # environment every process of the job gets
    def env(self, extra: dict | None = None) -> dict:
        e = dict(os.environ)
        for k in ("RESULTS", "OUT", "PROFILE", "JOBS", "WORK_BASE", "SCENARIO_TIMEOUT", "PORT_BASE", "KEEP_WORK"):
            e.pop(k, None)
        e.update(COMMON_ENV)
        e[TOKEN_VAR] = self.token
        if extra:
            e.update(extra)
        return e

    def data(self, subdir: str = "data", **spec) -> None:
        spec.setdefault("seed", 17)
        spec_path = os.path.join(self.private, f"spec-{subdir.replace('/', '_')}.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        subprocess.run([sys.executable, os.path.join(HERE, "prepare_data.py"), spec_path,
                        os.path.join(self.work, subdir)], check=True)

    def write(self, rel: str, text: str) -> None:
        path = os.path.join(self.work, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def start(self, cmd: str, cwd: str | None = None, env: dict | None = None) -> subprocess.Popen:
        full = "set -o pipefail; " + cmd
        self.commands.append(f"(cwd={cwd or '.'}) {cmd}")
        p = subprocess.Popen(["bash", "-c", full], cwd=os.path.join(self.work, cwd or ""),
                             env=self.env(env), start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def wait(self, procs: list[subprocess.Popen]) -> list[int | None]:
        rcs = []
        for p in procs:
            left = self.deadline - time.time()
            try:
                rcs.append(p.wait(timeout=max(left, 0.1)))
            except subprocess.TimeoutExpired:
                self.timed_out = True
                self.kill_all()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                rcs.append(p.returncode)
        self.rcs.extend(rcs)
        return rcs

    def run(self, cmd: str, cwd: str | None = None, env: dict | None = None) -> int | None:
        return self.wait([self.start(cmd, cwd, env)])[0]

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for _ in range(3):
            if not kill_token(self.token):
                break
            time.sleep(0.3)

    def cleanup(self) -> None:
        self.kill_all()
        shutil.rmtree(self.private, ignore_errors=True)


# --------------------------------------------------------------------------------------
# launch styles
# --------------------------------------------------------------------------------------
def backend_args() -> str:
    return " --backend gloo" if CPU else ""


def tr_args(args: str) -> str:
    return f"{CODE_DIR}/trainer.py {args}{backend_args()}"


def style_tee(ctx: Ctx, args: str, log: str = "train.log", append: bool = False,
              env: dict | None = None) -> int | None:
    """torchrun, single node, console teed to one file."""
    tee = "tee -a" if append else "tee"
    cmd = f"{torchrun_cmd()} --nproc-per-node=2 --master-port={ctx.port} {tr_args(args)} 2>&1 | {tee} {log}"
    return ctx.run(cmd, env=env)


def style_perrank(ctx: Ctx, args: str, env: dict | None = None, side=None) -> int | None:
    """torchrun with per-rank files (--log-dir/--redirects/--tee) plus a console file."""
    cmd = (f"{torchrun_cmd()} --nproc-per-node=2 --master-port={ctx.port} --log-dir torchrun_logs "
           f"--redirects 3 --tee 3 {tr_args(args)} > console.log 2>&1")
    p = ctx.start(cmd, env=env)
    if side:
        side(ctx)
    return ctx.wait([p])[0]


def style_twonode(ctx: Ctx, args: str, node_env: tuple[dict, dict] = ({}, {})) -> list[int | None]:
    """Two torchrun agents (one per simulated node, one GPU each) meeting through c10d rendezvous."""
    rdzv_id = "lm" + secrets.token_hex(3)
    procs = []
    for k in (0, 1):
        env = dict(node_env[k])
        if not CPU:
            env["CUDA_VISIBLE_DEVICES"] = str(k)
        cmd = (f"{torchrun_cmd()} --nnodes=2 --nproc-per-node=1 --node-rank={k} --rdzv-backend=c10d "
               f"--rdzv-endpoint=127.0.0.1:{ctx.port} --rdzv-id={rdzv_id} --local-addr=127.0.0.{k + 1} "
               f"../{tr_args(args)} > ../node{k}.log 2>&1")
        procs.append(ctx.start(cmd, cwd=f"node{k}", env=env))
        if k == 0:
            time.sleep(1.5)
    return ctx.wait(procs)


def style_spawn(ctx: Ctx, args: str, env: dict | None = None) -> int | None:
    """The trainer starts its own workers with torch.multiprocessing.spawn."""
    cmd = f"python3 {tr_args(args)} --spawn-workers 2 --master-port {ctx.port} > train.log 2>&1"
    return ctx.run(cmd, env=env)


def node_dirs(ctx: Ctx, **spec) -> None:
    for k in (0, 1):
        os.makedirs(os.path.join(ctx.work, f"node{k}"), exist_ok=True)


# --------------------------------------------------------------------------------------
# scenarios
# --------------------------------------------------------------------------------------
SCENARIOS: dict[str, dict] = {}


def scenario(name: str, *, cpu: bool = True, solo: bool = False, timeout: int = DEFAULT_TIMEOUT,
             capture=("train.log", "console.log", "node0.log", "node1.log", "torchrun_logs", "logs",
                      "node0/logs", "node1/logs")):
    def deco(fn):
        SCENARIOS[name] = {"fn": fn, "cpu": cpu, "solo": solo, "timeout": timeout, "capture": capture,
                           "port": PORT_BASE + 10 * len(SCENARIOS)}
        return fn
    return deco


@scenario("oom-long-doc", cpu=False, solo=True)
def s_oom(ctx: Ctx):
    # rank 1's shard has four ~74k-token documents at the start of step 3 (micro-batch 0);
    # --max-seq-len is raised for "long context", so they are not truncated and eager attention
    # materialises a (4, 4, 73728, 73728) bf16 score tensor (162 GiB).
    ctx.data(train_docs=300, edits=[{"kind": "long_docs", "split": "train", "shard": 1, "start": 16,
                                     "count": 4, "length": 73729}])
    style_tee(ctx, "--max-seq-len 131072 --max-steps 60 --eval-every 20")


@scenario("stale-node-config")
def s_shape(ctx: Ctx):
    # node0's local copy of configs/model.json was edited to 6 heads (128 % 6 != 0); node1 has 4.
    node_dirs(ctx)
    base = {"vocab_size": 512, "d_model": 128, "n_layers": 2, "n_heads": 4, "mlp_ratio": 4.0,
            "rope_theta": 10000.0, "tie_embeddings": True}
    for k, heads in ((0, 6), (1, 4)):
        ctx.data(subdir=f"node{k}/data")
        ctx.write(f"node{k}/configs/model.json", json.dumps({**base, "n_heads": heads}, indent=2) + "\n")
    style_twonode(ctx, "--model-config configs/model.json --max-steps 60 --eval-every 20")


@scenario("batch-divisibility")
def s_config(ctx: Ctx):
    ctx.data()
    style_spawn(ctx, "--micro-batch-size 8 --global-batch-size 60 --max-steps 60")


@scenario("apex-missing")
def s_import(ctx: Ctx):
    ctx.data()
    style_tee(ctx, "--parallel fsdp --optimizer fused_lamb --max-steps 60")


@scenario("truncated-ckpt")
def s_ckpt(ctx: Ctx):
    ctx.data()
    common = "--save-every 6 --eval-every 10 --log-dir logs"
    style_tee(ctx, f"--max-steps 12 {common}", append=True)
    with open(os.path.join(ctx.work, "checkpoints", "latest")) as f:
        latest = f.read().strip()
    victim = os.path.join(ctx.work, "checkpoints", latest, "rank1.pt")
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.truncate(int(size * 0.4))
    ctx.notes.append(f"truncated {latest}/rank1.pt from {size} to {int(size * 0.4)} bytes between runs")
    time.sleep(2)
    style_tee(ctx, f"--max-steps 40 --resume auto {common}", append=True)


@scenario("empty-docs-nan")
def s_nan(ctx: Ctx):
    # documents 36..39 of rank 0's shard are empty -> step 5, micro-batch 1 has no target tokens
    ctx.data(edits=[{"kind": "empty_docs", "split": "train", "shard": 0, "start": 36, "count": 4}])
    style_perrank(ctx, "--parallel fsdp --max-steps 60 --eval-every 20")


@scenario("node-vocab-oov")
def s_oov(ctx: Ctx):
    # node1's copy of shard 1 was re-tokenized with a larger vocabulary (ids >= 512) -> rank 1
    node_dirs(ctx)
    ctx.data(subdir="node0/data")
    ctx.data(subdir="node1/data", edits=[{"kind": "oov_tokens", "split": "train", "shard": 1, "start": 24,
                                           "count": 2, "per_doc": 3, "extra_vocab": 64}])
    style_twonode(ctx, "--max-steps 60 --eval-every 20")


@scenario("stale-ckpt-lock", timeout=170)
def s_hang(ctx: Ctx):
    # a lock file left behind by an earlier job: rank 0 waits for it forever after saving step 10
    ctx.data()
    ctx.write("checkpoints/.latest.lock", "gpu-node-03 41877\n")
    style_tee(ctx, "--max-steps 200 --save-every 10 --eval-every 50 --log-dir logs")


@scenario("node-deadline-exit", timeout=180)
def s_exit(ctx: Ctx):
    # node1 believes the job ends in 40 s: rank 1 checkpoints and sys.exit(0)s ~30 s in, silently
    node_dirs(ctx)
    for k in (0, 1):
        ctx.data(subdir=f"node{k}/data")
    now = time.time()
    env0 = {"JOB_END_TIME": str(int(now + 4 * 3600))}
    env1 = {"JOB_END_TIME": str(int(now + 40))}
    style_twonode(ctx, "--max-steps 100000 --log-every 10 --eval-every 500", node_env=(env0, env1))


@scenario("rank0-sigkill")
def s_kill(ctx: Ctx):
    ctx.data()

    def killer(c: Ctx):
        if not wait_for_regex(os.path.join(c.work, "console.log"), r"step\s+8/", 90):
            c.notes.append("never saw step 8; no kill sent")
            return
        # the rank-0 worker itself, not its DataLoader children (decide before killing anything)
        targets = [pid for pid in pids_with_token(c.token, extra=b"RANK=0")
                   if b"RANK=0" not in _read_environ(_ppid(pid))]
        for pid in targets:
            os.kill(pid, signal.SIGKILL)
            c.notes.append(f"sent SIGKILL to rank 0 worker pid {pid}")

    style_perrank(ctx, "--parallel fsdp --max-steps 3000 --eval-every 100", side=killer)


@scenario("uneven-val-allreduce")
def s_mismatch(ctx: Ctx):
    # rank 0's validation shard has 34 documents (9 batches), rank 1's has 32 (8 batches);
    # evaluate() all-reduces per batch, so rank 0 issues one extra all_reduce.
    ctx.data(edits=[{"kind": "extra_docs", "split": "val", "shard": 0, "count": 2}])
    style_spawn(ctx, "--parallel fsdp --max-steps 60 --eval-every 10", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})


@scenario("corrupt-jsonl-worker")
def s_worker(ctx: Ctx):
    # line 37 of rank 1's train shard is cut off mid-record (a partially copied file)
    ctx.data(edits=[{"kind": "truncate_line", "split": "train", "shard": 1, "index": 37, "keep": 0.6}])
    style_spawn(ctx, "--parallel fsdp --num-workers 2 --max-steps 60 --eval-every 20")


@scenario("ddp-generate-attr")
def s_attr(ctx: Ctx):
    ctx.data()
    style_perrank(ctx, "--max-steps 60 --eval-every 10 --sample-every 10 --log-dir logs")


@scenario("master-port-busy")
def s_port(ctx: Ctx):
    ctx.data()
    squat = ("import socket,time\n"
             "try:\n"
             "    s=socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
             f"    s.bind(('::',{ctx.port}))\n"
             "except OSError:\n"
             f"    s=socket.socket(); s.bind(('0.0.0.0',{ctx.port}))\n"
             "s.listen(16)\n"
             "time.sleep(900)\n")
    path = os.path.join(ctx.private, "squat.py")
    with open(path, "w") as f:
        f.write(squat)
    ctx.start(f"exec python3 {shlex.quote(path)}")  # killed with the job's processes at the end
    ctx.procs.pop()
    ctx.commands[-1] = f"(port holder) a process listening on :{ctx.port}"
    if not wait_port_listening(ctx.port):
        ctx.notes.append("port holder did not come up")
    style_tee(ctx, "--max-steps 60")


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def run_one(name: str, results: str) -> dict:
    sc = SCENARIOS[name]
    ctx = Ctx(name, sc["port"], sc["timeout"])
    say(f"start {name} in {ctx.work}")
    t0 = time.time()
    err = None
    try:
        sc["fn"](ctx)
    except Exception as e:  # a generator problem, not the job's failure
        err = f"{type(e).__name__}: {e}"
    finally:
        ctx.cleanup()
    wall = time.time() - t0
    dest = os.path.join(results, f"gpu2-{name}")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    copied = []
    for rel in sc["capture"]:
        src = os.path.join(ctx.work, rel)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, rel), symlinks=False)
            copied.append(rel + "/")
        elif os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
            copied.append(rel)
    if not os.environ.get("KEEP_WORK"):
        shutil.rmtree(ctx.work, ignore_errors=True)
    rec = {"scenario": name, "rcs": ctx.rcs, "wall_s": round(wall, 1), "timed_out": ctx.timed_out,
           "workdir": ctx.work, "commands": ctx.commands, "notes": ctx.notes, "copied": copied,
           "generator_error": err}
    say(f"done  {name}: rc={ctx.rcs} wall={wall:.0f}s timed_out={ctx.timed_out}"
        + (f" GENERATOR ERROR {err}" if err else ""))
    return rec


def write_versions(meta: str) -> None:
    lines = [f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", f"profile: {PROFILE}",
             f"hostname: {socket.gethostname()}", f"torchrun: {torchrun_cmd()}"]
    probe = ("import sys, platform, importlib.util as u, torch\n"
             "print('python:', sys.version.replace('\\n', ' '))\n"
             "print('platform:', platform.platform())\n"
             "print('torch:', torch.__version__)\n"
             "print('cuda (build):', torch.version.cuda)\n"
             "print('cuda available:', torch.cuda.is_available())\n"
             "print('device count:', torch.cuda.device_count())\n"
             "print('devices:', [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])\n"
             "try:\n    print('nccl:', '.'.join(map(str, torch.cuda.nccl.version())))\n"
             "except Exception as e:\n    print('nccl: n/a', e)\n"
             "for m in ('apex', 'lion_pytorch', 'numpy'):\n    print(f'module {m}:', 'present' if u.find_spec(m) else 'absent')\n")
    try:
        out = subprocess.run(["python3", "-c", probe], capture_output=True, text=True, timeout=120)
        lines.append(out.stdout.strip() + ("\n" + out.stderr.strip() if out.stderr.strip() else ""))
    except Exception as e:
        lines.append(f"probe failed: {e}")
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
            lines.append("nvidia-smi:\n" + out.stdout)
        except Exception as e:
            lines.append(f"nvidia-smi failed: {e}")
    lines.append("env: " + " ".join(f"{k}={v}" for k, v in COMMON_ENV.items()))
    with open(os.path.join(meta, "versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> int:
    results = os.environ.get("RESULTS")
    if not results:
        print("set RESULTS=/some/dir", file=sys.stderr)
        return 2
    results = os.path.abspath(results)
    meta = os.path.join(results, "_meta")
    os.makedirs(meta, exist_ok=True)
    os.environ.update(COMMON_ENV)

    names = sys.argv[1:] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenarios: {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
        return 2
    skipped = [n for n in names if CPU and not SCENARIOS[n]["cpu"]]
    names = [n for n in names if n not in skipped]
    if skipped:
        say(f"PROFILE=cpu: skipping GPU-only scenarios {skipped}")

    write_versions(meta)
    t0 = time.time()
    records = []
    solo = [n for n in names if SCENARIOS[n]["solo"]]
    shared = sorted((n for n in names if not SCENARIOS[n]["solo"]), key=lambda n: -SCENARIOS[n]["timeout"])
    for n in solo:
        records.append(run_one(n, results))
    jobs = int(os.environ.get("JOBS", "2" if CPU else "6"))
    with cf.ThreadPoolExecutor(max_workers=max(jobs, 1)) as ex:
        for rec in ex.map(lambda n: run_one(n, results), shared):
            records.append(rec)
    total = time.time() - t0

    with open(os.path.join(meta, "run_log.json"), "w") as f:
        json.dump({"profile": PROFILE, "total_wall_s": round(total, 1), "skipped": skipped,
                   "scenarios": records}, f, indent=2)
    with open(os.path.join(meta, "run_log.txt"), "w") as f:
        f.write(f"profile={PROFILE} total_wall_s={total:.1f} skipped={skipped}\n")
        for r in records:
            f.write(f"{r['scenario']:24s} rc={r['rcs']} wall_s={r['wall_s']} timed_out={r['timed_out']}"
                    f"{' generator_error=' + r['generator_error'] if r['generator_error'] else ''}\n")
            for c in r["commands"]:
                f.write(f"    $ {c}\n")
            for nt in r["notes"]:
                f.write(f"    note: {nt}\n")
    shutil.copy2(os.path.join(HERE, "design.json"), os.path.join(meta, "design.json"))
    say(f"all done in {total:.0f}s; results in {results}")

    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        tgz = os.path.join(out, "gpu2_samples.tar.gz")
        with tarfile.open(tgz, "w:gz") as tar:
            tar.add(results, arcname=os.path.basename(results.rstrip("/")) or "results")
        say(f"packed {tgz}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
