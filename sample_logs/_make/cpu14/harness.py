"""Run the failure scenarios of this project and keep every log unchanged.

usage: RESULTS=/tmp/cpu14-results python harness.py [scenario ...]
"""
import json, os, shutil, signal, socket, subprocess, sys, threading, time, uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("VENV", "/tmp/cpu14-venv")
PY = f"{VENV}/bin/python"
TORCHRUN = f"{VENV}/bin/torchrun"
RESULTS = os.environ.get("RESULTS", "/tmp/cpu14-results")
RUNS = "/tmp/c14runs"
TIMEOUT = 150
CFG = "configs/tiny_llama.json"
TR = "train.py --config " + CFG


def tr(port, n=2, extra=""):
    return f"{TORCHRUN} --nproc-per-node {n} --master-port {port} {extra}".strip()


def two_node(port, args, logname="node{r}.log"):
    cmds = []
    for r in (0, 1):
        cmds.append(f"GLOO_SOCKET_IFNAME=lo {TORCHRUN} --nnodes 2 --nproc-per-node 1 --node-rank {r} "
                    f"--master-addr 127.0.0.1 --master-port {port} --local-addr 127.0.0.{r+1} "
                    f"{TR} {args} > {logname.format(r=r)} 2>&1")
    return (f"{cmds[0]} & p0=$!; {cmds[1]} & p1=$!; wait $p0; r0=$?; wait $p1; r1=$?; "
            "[ $r0 -ne 0 ] && exit $r0; exit $r1")


# ---- data defects (applied after make_data) ----
def fifo_shard(wd, idx):
    p = f"{wd}/data/shard_{idx:05d}.jsonl"; os.remove(p); os.mkfifo(p)


def truncated_line(wd, idx):
    p = f"{wd}/data/shard_{idx:05d}.jsonl"
    lines = open(p).read().splitlines(True)
    lines[17] = lines[17][: len(lines[17]) // 2] + "\n"
    open(p, "w").write("".join(lines))


def long_docs(wd, idx):
    import random
    r = random.Random(1)
    p = f"{wd}/data/shard_{idx:05d}.jsonl"
    lines = open(p).read().splitlines(True)
    for i in (5, 23):
        lines[i] = json.dumps({"tokens": [r.randrange(1, 512) for _ in range(r.randint(300, 700))]}) + "\n"
    open(p, "w").write("".join(lines))


def drop_file(wd, rel):
    os.remove(os.path.join(wd, rel))


# ---- scenarios: list of phases; each phase (cmd, pre-hook, watcher) ----
def scenarios():
    S = {}
    S["mesh_world_mismatch"] = dict(port=29701, phases=[dict(
        cmd=f"set -o pipefail; {tr(29701)} {TR} --parallel.dp_replicate 2 --parallel.dp_shard 2 2>&1 | tee train.log")])
    S["missing_fused_norm"] = dict(port=29702, phases=[dict(
        cmd=f"{PY} -m torch.distributed.run --nproc-per-node 2 --master-port 29702 {TR} --model.norm_type fused_rmsnorm > out.log 2> err.log")])
    S["port_taken"] = dict(port=29703, occupy=29703, phases=[dict(
        cmd=f"set -o pipefail; {tr(29703)} {TR} 2>&1 | tee train.log")])
    S["rank_stall_fifo"] = dict(port=29704, data_hook=lambda wd: fifo_shard(wd, 2), phases=[dict(
        cmd=f"{tr(29704, 3, '--log-dir logs --redirects 3 --tee 3')} {TR} > console.log 2>&1")])
    S["rank_sigkill"] = dict(port=29705, phases=[dict(
        cmd=f"{tr(29705, 2, '--log-dir logs --redirects 3 --tee 3')} {TR} --training.steps 2000 --checkpoint.interval 500 > console.log 2>&1",
        kill_rank=1, kill_after=10)])
    S["host_mem_limit"] = dict(port=29706, ulimit_v=4000000, phases=[dict(
        cmd=f"{PY} -m torch.distributed.run --nproc-per-node 2 --master-port 29706 {TR} --model.vocab_size 32000 --training.batch_size 64 --training.seq_len 127 > out.log 2> err.log")])
    S["ckpt_shard_missing"] = dict(port=29707, phases=[
        dict(cmd=two_node(29707, "--training.steps 10", "node{r}.log")),
        dict(pre=lambda wd: drop_file(wd, "outputs/checkpoint/step-10/__1_0.distcp"),
             cmd=two_node(29707, "--training.steps 20", "node{r}.resume.log"))])
    S["ckpt_layer_mismatch"] = dict(port=29708, phases=[
        dict(cmd=f"set -o pipefail; {tr(29708)} {TR} --training.steps 10 2>&1 | tee train.log"),
        dict(cmd=f"set -o pipefail; {tr(29708)} {TR} --training.steps 20 --model.n_layers 3 2>&1 | tee train_resume.log")])
    S["metrics_jsonl_bug"] = dict(port=29709, phases=[dict(
        cmd=f"{tr(29709, 2, '--log-dir logs --redirects 3 --tee 3')} {TR} --metrics.jsonl metrics.jsonl > console.log 2>&1")])
    S["corrupt_jsonl_line"] = dict(port=29710, data_hook=lambda wd: truncated_line(wd, 1), phases=[dict(
        cmd=two_node(29710, ""))])
    S["long_docs_shape"] = dict(port=29711, data_hook=lambda wd: long_docs(wd, 3), phases=[dict(
        cmd=f"set -o pipefail; {tr(29711)} {TR} 2>&1 | tee train.log")])
    return S


def worker_pids_with_rank(port, rank):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            if f"MASTER_PORT={port}".encode() in env and f"RANK={rank}".encode() in env \
                    and b"TORCHELASTIC_RUN_ID=none" in env:
                out.append(int(p))
        except Exception:
            pass
    return out


def run_phase(wd, ph, sc, log):
    if ph.get("pre"):
        ph["pre"](wd)
    cmd = ph["cmd"]
    if sc.get("ulimit_v"):
        cmd = f"ulimit -v {sc['ulimit_v']}; " + cmd
    t0 = time.time()
    p = subprocess.Popen(["bash", "-c", cmd], cwd=wd, start_new_session=True)
    killer = None
    if ph.get("kill_rank") is not None:
        def k():
            time.sleep(ph["kill_after"])
            for pid in worker_pids_with_rank(sc["port"], ph["kill_rank"]):
                log.append(f"SIGKILL sent to pid {pid}")
                os.kill(pid, signal.SIGKILL)
        killer = threading.Thread(target=k, daemon=True); killer.start()
    try:
        rc = p.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM); time.sleep(5)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rc = p.wait(); log.append("harness timeout: process group killed")
    return rc, time.time() - t0


def run_one(name, sc):
    wd = os.path.join(RUNS, uuid.uuid4().hex[:10])
    os.makedirs(wd)
    shutil.copy(os.path.join(HERE, "train.py"), wd)
    shutil.copy(os.path.join(HERE, "make_data.py"), wd)
    shutil.copytree(os.path.join(HERE, "configs"), os.path.join(wd, "configs"))
    subprocess.run([PY, "make_data.py", "--out", "data"], cwd=wd, check=True)
    if sc.get("data_hook"):
        sc["data_hook"](wd)
    sock = None
    if sc.get("occupy"):  # another process already listens on the port
        sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        sock.bind(("0.0.0.0", sc["occupy"])); sock.listen(1)
    log, rcs, t_all = [], [], 0.0
    try:
        for ph in sc["phases"]:
            rc, dt = run_phase(wd, ph, sc, log); rcs.append(rc); t_all += dt
    finally:
        if sock:
            sock.close()
    dst = os.path.join(RESULTS, f"cpu14-{name}")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(wd, dst, ignore=shutil.ignore_patterns(
        "data", "outputs", "train.py", "make_data.py", "configs"))
    return name, dict(workdir=wd, exit_codes=rcs, wall_s=round(t_all, 1), notes=log,
                      commands=[ph["cmd"] for ph in sc["phases"]])


def main():
    S = scenarios()
    names = sys.argv[1:] or list(S)
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    rj = os.path.join(RESULTS, "_meta", "runs.json")
    runs = json.load(open(rj)) if os.path.exists(rj) else {}
    with ThreadPoolExecutor(2) as ex:
        for name, info in ex.map(lambda n: run_one(n, S[n]), names):
            print(name, info["exit_codes"], info["wall_s"], flush=True)
            runs[name] = info
            json.dump(runs, open(rj, "w"), indent=1)
    ver = subprocess.run([PY, "-c", "import torch,sys,platform;print('torch', torch.__version__);"
                          "print('python', sys.version.split()[0]);print('platform', platform.platform())"],
                         capture_output=True, text=True).stdout
    open(os.path.join(RESULTS, "_meta", "versions.txt"), "w").write(ver + f"nproc {os.cpu_count()}\nbackend gloo (CPU)\n")


if __name__ == "__main__":
    main()
