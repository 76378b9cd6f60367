#!/usr/bin/env python
"""gpu7 harness: run clipforge failure scenarios in neutral work dirs and collect their logs."""
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
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE = os.environ.get("PROFILE", "gpu")
CPU = PROFILE == "cpu"
RESULTS = os.path.abspath(os.environ.get("RESULTS", "/tmp/gpu7-results"))
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g7runs")
SCEN_TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "240" if CPU else "180"))
MAX_PAR = int(os.environ.get("MAX_PAR", "2" if CPU else "7"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29700"))
PY = os.environ.get("PYTHON", "python")
COMMON_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
              "PYTHONUNBUFFERED": "1"}
# smaller model / fp32 on CPU so that a step takes well under a second with gloo
CPU_OVR = ("model.vision_width=64 model.text_width=64 model.vision_layers=2 model.text_layers=2 "
           "model.embed_dim=64 train.precision=fp32 data.eval_batch_size=32")
CODE = ["train.py", "clipforge", "configs", "tools"]

# --------------------------------------------------------------------------- scenarios
# style: A torchrun|tee, B torchrun --log-dir/--redirects/--tee, C two agents as two nodes,
#        D launch script, stdout/stderr in separate files, M python -m torch.distributed.run | tee,
#        S torch.multiprocessing.spawn
SCENARIOS = [
    dict(name="neg-queue-oom", style="B", gpu_only=True,
         ovr="loss.neg_queue_size=268435456"),
    dict(name="aux-labels-one-based-export", style="C", env={"NCCL_DEBUG": "WARN"},
         ovr="model.num_classes=10 loss.aux_weight=0.2", data="one_based"),
    dict(name="crop-size-vs-pos-embed", style="A", ovr="data.crop_size=56 dist.strategy=fsdp2"),
    dict(name="turbojpeg-decoder-missing", style="M", ovr="data.decoder=turbojpeg"),
    dict(name="spawn-master-addr-unresolvable", style="S", ovr="dist.master_addr=trainer-head-0"),
    dict(name="fifo-shard-stall", style="A", env={"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
         ovr="train.eval_every=0", data="fifo"),
    dict(name="tar-shard-truncated", style="B", ovr="train.eval_every=0", data="truncate_tar"),
    dict(name="npy-cache-rewritten-sigbus", style="D", ovr="data.format=npy-cache data.num_workers=0 "
         "train.max_steps=400 train.eval_every=0 train.save_every=0", side="truncate_npy"),
    dict(name="resume-after-freezing-text-tower", style="A",
         prep="train.max_steps=10 train.save_every=10 train.eval_every=0",
         ovr="train.resume=auto train.freeze_text_tower=true"),
    dict(name="resume-compiled-checkpoint-eager", style="C", env={"NCCL_DEBUG": "INFO"},
         prep="train.max_steps=10 train.save_every=10 train.eval_every=0 train.compile=true "
              "train.compile_backend=aot_eager",
         ovr="train.resume=auto"),
    dict(name="override-key-typo", style="A", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
         ovr="optim.weight_decay=0.05"),
    dict(name="fp16-params-gradscaler", style="B", env={"NCCL_DEBUG": "INFO"},
         ovr="model.dtype=float16 train.precision=fp16"),
    dict(name="retrieval-eval-tiny-set", style="C", env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"},
         ovr="data.max_eval_samples=8 train.eval_every=10 train.save_every=0"),
    dict(name="rng-state-missing-after-scale-up", style="B",
         prep="train.max_steps=10 train.save_every=10 train.eval_every=0", prep_nproc=1,
         ovr="train.resume=auto train.eval_every=0"),
]


def log(msg):
    print(f"[run_all {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rand_name(n=10):
    return "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n))


# --------------------------------------------------------------------------- data
def make_template(root):
    tpl = os.path.join(root, "_template")
    if os.path.exists(os.path.join(tpl, "data", "MANIFEST.json")):
        return tpl
    os.makedirs(tpl, exist_ok=True)
    for c in CODE:
        src = os.path.join(HERE, c)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(tpl, c))
    subprocess.run([PY, "tools/make_data.py", "--npy-cache-ranks", "2", "--npy-cache-samples", "1024"],
                   cwd=tpl, check=True)
    subprocess.run([PY, "tools/make_data.py", "--out", "data_onebased", "--one-based-shards", "1,3"],
                   cwd=tpl, check=True)
    return tpl


def prepare_workdir(tpl, sc):
    wd = os.path.join(WORK_ROOT, rand_name(), "clipforge")
    os.makedirs(wd)
    for c in CODE:
        src = os.path.join(tpl, c)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(wd, c))
    data_src = os.path.join(tpl, "data_onebased" if sc.get("data") == "one_based" else "data")
    shutil.copytree(data_src, os.path.join(wd, "data"))
    os.makedirs(os.path.join(wd, "tmp"))
    kind = sc.get("data")
    if kind == "fifo":
        # the shard sits on a mount that never answers: opening it blocks forever
        p = os.path.join(wd, "data/train/shard-0005.tar")
        os.remove(p)
        os.mkfifo(p)
    elif kind == "truncate_tar":
        # an interrupted copy: cut shard-0003 in the middle of a member's data
        p = os.path.join(wd, "data/train/shard-0003.tar")
        with tarfile.open(p) as tf:
            members = tf.getmembers()
        cut = members[len(members) // 3].offset_data + 100
        os.truncate(p, cut)
    return wd


# --------------------------------------------------------------------------- launch
def torchrun(port, nproc=2, extra=""):
    return f"torchrun --nproc-per-node={nproc} --master-port={port} {extra}".strip()


def build_commands(sc, port, ovr, wd, nproc=2):
    """Return list of (shell command, label) run concurrently (two for the two-node style)."""
    st = sc["style"]
    args = f"train.py --config configs/vit_s8.json {ovr}"
    if st == "A":
        return [f"set -o pipefail; {torchrun(port, nproc)} {args} 2>&1 | tee train.log"]
    if st == "B":
        return [f"{torchrun(port, nproc, '--log-dir logs/torchrun --redirects 3 --tee 3')} {args} "
                f"> console.log 2>&1"]
    if st == "M":
        return [f"set -o pipefail; {PY} -m torch.distributed.run --nproc_per_node {nproc} "
                f"--rdzv_backend c10d --rdzv_endpoint localhost:{port} {args} 2>&1 | tee run.log"]
    if st == "S":
        return [f"{PY} train.py --spawn {nproc} --config configs/vit_s8.json dist.master_port={port} {ovr} "
                f"> spawn.log 2>&1"]
    if st == "D":
        with open(os.path.join(wd, "launch.sh"), "w") as fh:
            fh.write("#!/bin/bash\n# clipforge launcher\nset -e\n"
                     f"NGPU=${{NGPU:-{nproc}}}\nPORT=${{PORT:-{port}}}\n"
                     "export OMP_NUM_THREADS=4\n"
                     f"{PY} -m torch.distributed.run --nnodes 1 --nproc_per_node $NGPU "
                     "--master_addr 127.0.0.1 --master_port $PORT \\\n"
                     f"    train.py --config configs/vit_s8.json {ovr}\n")
        return ["bash launch.sh > train.out 2> train.err"]
    if st == "C":
        cmds = []
        for k in range(2):
            cvd = "" if CPU else f"CUDA_VISIBLE_DEVICES={k} "
            cmds.append(f"{'sleep 3; ' if k else ''}{cvd}torchrun --nnodes=2 --nproc-per-node=1 --node-rank={k} "
                        f"--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:{port} --rdzv-id=clip-job "
                        f"--local-addr=127.0.0.{k + 1} {args} > node{k}.log 2>&1")
        return cmds
    raise ValueError(st)


def kill_marked(marker):
    """Kill every process that carries our private env marker: SIGTERM, then SIGKILL."""
    def find():
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            try:
                with open(f"/proc/{p}/environ", "rb") as fh:
                    if f"G7_MARK={marker}".encode() in fh.read():
                        pids.append(int(p))
            except OSError:
                pass
        return pids
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = find()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(3)


def run_group(cmds, cwd, env, timeout, marker):
    """Run the commands concurrently (own sessions); returns (rcs, timed_out)."""
    procs = [subprocess.Popen(["bash", "-c", c], cwd=cwd, env=env, start_new_session=True) for c in cmds]
    deadline = time.time() + timeout
    timed_out = False
    while any(p.poll() is None for p in procs):
        if time.time() > deadline:
            timed_out = True
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except OSError:
                        pass
            t2 = time.time() + 10
            while any(p.poll() is None for p in procs) and time.time() < t2:
                time.sleep(0.5)
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
            break
        time.sleep(0.5)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    kill_marked(marker)
    return [p.returncode for p in procs], timed_out


def side_truncate_npy(wd, stop):
    """A cache refresh (`cp new_cache old_cache`) truncates rank 1's memmapped file under the job."""
    logf = os.path.join(wd, "outputs/clip-vit-s8/logs/rank0.log")
    target = os.path.join(wd, "data/cache/rank1.images.npy")
    while not stop.is_set():
        try:
            with open(logf) as fh:
                if "step 10/" in fh.read():
                    break
        except OSError:
            pass
        time.sleep(0.2)
    else:
        return
    with open(target, "r+b") as fh:
        fh.truncate(0)
        fh.write(b"\x93NUMPY")


def run_scenario(i, sc, tpl):
    port = BASE_PORT + 10 * i
    wd = prepare_workdir(tpl, sc)
    marker = uuid.uuid4().hex
    env = dict(os.environ)
    env.update(COMMON_ENV)
    env["TMPDIR"] = os.path.join(wd, "tmp")
    env["G7_MARK"] = marker
    if CPU:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cpu_ovr = CPU_OVR + " " if CPU else ""
    t0 = time.time()
    meta = dict(scenario=sc["name"], style=sc["style"], workdir=wd, port=port, profile=PROFILE)
    if sc.get("prep"):
        penv = dict(env)
        pcmd = (f"{torchrun(port + 5, sc.get('prep_nproc', 2))} train.py --config configs/vit_s8.json "
                f"{cpu_ovr}{sc['prep']} > prep.log 2>&1")
        rcs, to = run_group([pcmd], wd, penv, SCEN_TIMEOUT, marker)
        meta["prep"] = dict(cmd=pcmd, rc=rcs[0], timed_out=to, wall_s=round(time.time() - t0, 1))
        if rcs[0] != 0:
            log(f"{sc['name']}: prep run failed rc={rcs[0]}")
    env.update(sc.get("env", {}))
    cmds = build_commands(sc, port, cpu_ovr + sc["ovr"], wd)
    stop = threading.Event()
    side = None
    if sc.get("side") == "truncate_npy":
        side = threading.Thread(target=side_truncate_npy, args=(wd, stop), daemon=True)
        side.start()
    t1 = time.time()
    rcs, to = run_group(cmds, wd, env, SCEN_TIMEOUT, marker)
    stop.set()
    meta.update(cmds=cmds, env={k: v for k, v in sc.get("env", {}).items()}, rcs=rcs, timed_out=to,
                wall_s=round(time.time() - t1, 1), total_s=round(time.time() - t0, 1))
    collect(wd, os.path.join(RESULTS, f"gpu7-{sc['name']}"))
    log(f"{sc['name']}: rc={rcs} timed_out={to} wall={meta['wall_s']}s")
    return meta


def collect(wd, dest):
    """Copy everything the job wrote, unchanged, except the code, data, checkpoints and temp dir."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    skip_top = set(CODE) | {"data", "tmp", "prep.log", "__pycache__"}
    for dirpath, dirnames, filenames in os.walk(wd):
        rel = os.path.relpath(dirpath, wd)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in skip_top]
        dirnames[:] = [d for d in dirnames if d != "checkpoints"]
        for f in filenames:
            if rel == "." and f in skip_top:
                continue
            src = os.path.join(dirpath, f)
            dst = os.path.join(dest, rel, f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)


def versions():
    out = []
    code = ("import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__); "
            "print('cuda', torch.version.cuda); print('cuda_available', torch.cuda.is_available());\n"
            "try:\n print('nccl', '.'.join(map(str, torch.cuda.nccl.version())))\nexcept Exception as e:\n print('nccl', e)\n"
            "for i in range(torch.cuda.device_count()): print('gpu', i, torch.cuda.get_device_name(i))\n"
            "import numpy; print('numpy', numpy.__version__)")
    for cmd in ([PY, "-c", code], ["nvidia-smi"], ["uname", "-a"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            out.append(f"$ {' '.join(cmd[:2]) if cmd[0] == PY else ' '.join(cmd)}\n{r.stdout}{r.stderr}")
        except Exception as e:  # noqa: BLE001
            out.append(f"$ {cmd[0]}\n{e}")
    return "\n".join(out)


def main():
    names = sys.argv[1:]
    sel = [(i, s) for i, s in enumerate(SCENARIOS) if (not names or s["name"] in names)]
    unknown = set(names) - {s["name"] for s in SCENARIOS}
    if unknown:
        sys.exit(f"unknown scenario(s): {sorted(unknown)}")
    if CPU:
        sel = [(i, s) for i, s in sel if not s.get("gpu_only")]
    os.makedirs(os.path.join(RESULTS, "_meta"), exist_ok=True)
    os.makedirs(WORK_ROOT, exist_ok=True)
    with open(os.path.join(RESULTS, "_meta", "versions.txt"), "w") as fh:
        fh.write(versions())
    t0 = time.time()
    tpl = make_template(os.path.join(WORK_ROOT, "_tpl_" + rand_name(6)))
    log(f"profile={PROFILE} scenarios={len(sel)} max_par={MAX_PAR} timeout={SCEN_TIMEOUT}s")
    # longest first: hangs, two-node and prep scenarios
    slow = {"fifo-shard-stall", "npy-cache-rewritten-sigbus", "retrieval-eval-tiny-set"}
    sel.sort(key=lambda x: (x[1]["name"] not in slow, x[1]["style"] != "C", not x[1].get("prep"), x[0]))
    metas = []
    runlog = open(os.path.join(RESULTS, "_meta", "run_log.txt"), "a")
    lock = threading.Lock()

    def job(item):
        i, s = item
        try:
            m = run_scenario(i, s, tpl)
        except Exception as e:  # noqa: BLE001
            m = dict(scenario=s["name"], error=repr(e))
            log(f"{s['name']}: harness error {e!r}")
        with lock:
            metas.append(m)
            runlog.write(json.dumps(m) + "\n")
            runlog.flush()
        return m

    with ThreadPoolExecutor(MAX_PAR) as ex:
        list(ex.map(job, sel))
    metas.sort(key=lambda m: m["scenario"])
    with open(os.path.join(RESULTS, "_meta", "runs.json"), "w") as fh:
        json.dump(dict(profile=PROFILE, wall_s=round(time.time() - t0, 1), runs=metas), fh, indent=2)
    log(f"done in {time.time() - t0:.0f}s; results in {RESULTS}")
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        tgz = os.path.join(out, "gpu7_samples.tar.gz")
        with tarfile.open(tgz, "w:gz") as tf:
            tf.add(RESULTS, arcname=os.path.basename(RESULTS.rstrip("/")))
        log(f"wrote {tgz}")


if __name__ == "__main__":
    main()
