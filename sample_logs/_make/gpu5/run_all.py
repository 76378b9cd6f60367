#!/usr/bin/env python3
"""Run the failure scenarios and collect what each job wrote.

    RESULTS=/some/dir python3 run_all.py [SCENARIO ...]
    PROFILE=cpu RESULTS=/tmp/gpu5-cpu python3 run_all.py      # gloo/CPU subset

Every scenario runs in a fresh work dir under $WORK_ROOT (default /tmp/g5runs)
with its own copy of the code; the console files, the torchrun log dir and the
trainer's per-rank logs are copied unchanged to $RESULTS/gpu5-<scenario>/.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE = os.environ.get("PROFILE", "gpu")
CPU = PROFILE == "cpu"
PY = os.environ.get("PYTHON", "python3")
WORK_ROOT = os.environ.get("WORK_ROOT", "/tmp/g5runs")
SCEN_TIMEOUT = int(os.environ.get("SCEN_TIMEOUT", "300" if CPU else "150"))
PREP_TIMEOUT = int(os.environ.get("PREP_TIMEOUT", "300" if CPU else "150"))
MAX_PAR = int(os.environ.get("MAX_PAR", "2" if CPU else "7"))
BASE_PORT = int(os.environ.get("BASE_PORT", "29400"))

CODE_FILES = ["pretrain.py", "train.sh", "megatron_lite", "tools"]
REPO_NAME = "megatron-lite"

COMMON_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
}


# ------------------------------------------------------------------ arguments

def base_args(tp=2, **over):
    """Ordinary Megatron-Lite arguments for a tiny GPT, per profile."""
    a = {
        "--num-layers": 2, "--hidden-size": 256, "--num-attention-heads": 8,
        "--seq-length": 64 if CPU else 128, "--max-position-embeddings": 512 if CPU else 1024,
        "--micro-batch-size": 2 if CPU else 4, "--global-batch-size": 4 if CPU else 16,
        "--train-iters": 20 if CPU else 40, "--log-interval": 5,
        "--lr": "3e-4", "--min-lr": "3e-5", "--lr-decay-style": "cosine",
        "--lr-warmup-iters": 5, "--weight-decay": 0.1, "--clip-grad": 1.0,
        "--tensor-model-parallel-size": tp,
        "--data-path": "data/corpus_text_document",
        "--tokenizer-type": "NullTokenizer", "--vocab-size": 50257,
        "--distributed-timeout-minutes": 1, "--num-workers": 2, "--seed": 1234,
    }
    if not CPU:
        a["--bf16"] = None
    else:
        a["--distributed-backend"] = "gloo"
    a.update(over)
    out = []
    for k, v in a.items():
        if v is False:
            continue
        out.append(k)
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            out.extend(str(x) for x in v)
        else:
            out.append(str(v))
    return out


def sh_env(**over):
    """Environment for `bash train.sh`, per profile."""
    e = {"NGPU": "2", "TP": "2"}
    if CPU:
        e.update({"BACKEND": "gloo", "PRECISION": "fp32", "MBS": "2", "GBS": "4", "SEQ": "64",
                  "MAX_POS": "512", "TRAIN_ITERS": "20"})
    e.update({k: str(v) for k, v in over.items()})
    return e


# ------------------------------------------------------------------ setup helpers

def make_corpus(wd, prefix="data/corpus_text_document", num_docs=2000, seed=1, max_len=400):
    subprocess.run([PY, "tools/preprocess_data.py", "--output-prefix", prefix,
                    "--num-docs", str(num_docs), "--seed", str(seed),
                    "--max-doc-len", str(max_len)],
                   cwd=wd, check=True, stdout=subprocess.DEVNULL, env=scen_env({}))


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ------------------------------------------------------------------ scenarios

def scenarios():
    S = {}

    # 1. one "node" runs with another hidden size; TP collectives disagree
    S["tp-hidden-size-differs-per-node"] = dict(
        style="C", category="config",
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        node_args=[base_args(**{"--hidden-size": 256}), base_args(**{"--hidden-size": 320})],
        node_env=[{}, {}],
    )

    # 2. vocab padded to a multiple of 1: the last TP rank's embedding slice is one row short
    S["vocab-not-divisible-by-tp"] = dict(
        style="E", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        args=base_args(**{"--make-vocab-size-divisible-by": 1}),
    )

    # 3. checkpoint written with TP=2 resumed with TP=1 (DP=2)
    S["resume-tp2-checkpoint-with-tp1"] = dict(
        style="A",
        prep=base_args(**{"--train-iters": 10, "--save": "checkpoints/gpt-tiny",
                          "--save-interval": 10}),
        args=base_args(tp=1, **{"--load": "checkpoints/gpt-tiny",
                                "--save": "checkpoints/gpt-tiny", "--save-interval": 20}),
    )

    # 4. latest_checkpointed_iteration.txt points at iter 20, mp_rank_00 of it is missing
    def _drop_rank0(wd):
        shutil.rmtree(os.path.join(wd, "checkpoints/gpt-tiny/iter_0000020/mp_rank_00"))
    S["resume-missing-mp-rank-dir"] = dict(
        style="D",
        prep_sh=sh_env(TRAIN_ITERS=20, SAVE_INTERVAL=10, LOG_DIR="_prep/logs"),
        post_prep=_drop_rank0,
        sh=sh_env(TRAIN_ITERS=60 if not CPU else 30),
    )

    # 5. distributed optimizer over DP=2 with an odd number of parameters
    S["distopt-odd-param-count"] = dict(
        style="B",
        args=base_args(tp=1, **{"--hidden-size": 512, "--ffn-hidden-size": 1365,
                                "--num-layers": 3, "--use-distributed-optimizer": None}),
    )

    # 6. fp16 with a static loss scale meant as the initial dynamic one
    S["fp16-static-loss-scale-overflow"] = dict(
        style="D",
        sh=sh_env(PRECISION="fp16", LOSS_SCALE=4294967296, LOG_INTERVAL=1),
    )

    # 7. persistent comm buffer slot computed with the wrong stride -> illegal address (GPU)
    S["tp-comm-overlap-bad-buffer-offset"] = dict(
        style="B", gpu_only=True,
        args=base_args(**{"--tp-comm-overlap": None, "--seq-length": 2048,
                          "--max-position-embeddings": 2048, "--hidden-size": 1024,
                          "--num-attention-heads": 16, "--micro-batch-size": 4,
                          "--global-batch-size": 16}),
    )

    # 8. two one-GPU nodes, --gpus-per-node left at 8: rank 1 asks for cuda:1 (GPU)
    S["local-rank-from-gpus-per-node"] = dict(
        style="C", gpu_only=True,
        node_args=[base_args(), base_args()],
        node_env=[{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}],
    )

    # 9. ZeRO-1 (torch ZeroRedundancyOptimizer) puts the giant position table's Adam
    #    state on rank 0 only (GPU, needs both GPUs alone)
    S["zero1-adam-state-oom-on-one-rank"] = dict(
        style="B", gpu_only=True, exclusive=True,
        args=base_args(tp=1, **{"--hidden-size": 1024, "--num-attention-heads": 16,
                                "--seq-length": 512, "--max-position-embeddings": 13107200,
                                "--micro-batch-size": 2, "--global-batch-size": 8,
                                "--use-distributed-optimizer": None,
                                "--distributed-optimizer-impl": "zero"}),
    )

    # 10. NCCL pointed at an interface this machine does not have (GPU)
    S["nccl-socket-ifname-missing"] = dict(
        style="A", gpu_only=True,
        env={"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0"},
        args=base_args(),
    )

    # 11. node-local index cache holds a stale lock: that rank waits, its heartbeat kills it
    def _stale_lock(wd):
        d = os.path.join(wd, "local_cache_node1")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "index_build.lock"), "w") as f:
            f.write(str(dead_pid()))
    S["stale-index-lock-heartbeat-kill"] = dict(
        style="C", setup=_stale_lock,
        node_args=[base_args(tp=1, **{"--data-cache-path": "local_cache_node0",
                                      "--heartbeat-timeout": 30}),
                   base_args(tp=1, **{"--data-cache-path": "local_cache_node1",
                                      "--heartbeat-timeout": 30})],
        node_env=[{}, {}],
    )

    # 12. blended data where one .bin was truncated to 0 bytes: worker segfaults
    def _blend_data(wd):
        make_corpus(wd, "data/web_text_document", num_docs=2000, seed=2)
        make_corpus(wd, "data/code_text_document", num_docs=400, seed=3, max_len=200)
        open(os.path.join(wd, "data/code_text_document.bin"), "w").close()
    S["blended-empty-bin-worker-segfault"] = dict(
        style="E", setup=_blend_data, skip_corpus=True,
        args=base_args(**{"--data-path": ["0.8", "data/web_text_document",
                                          "0.2", "data/code_text_document"]}),
    )

    # 13. FSDP2 layout + EMA kept as full (plain) tensors
    S["fsdp2-ema-mixed-dtensor"] = dict(
        style="A",
        args=base_args(tp=1, **{"--parallel-layout": "fsdp2", "--ema-decay": 0.999}),
    )

    # 14. FSDP2 layout (meta init) + rope tables that are plain attributes
    S["fsdp2-rope-cache-on-meta"] = dict(
        style="D",
        sh=sh_env(TP=1, LAYOUT="fsdp2", POS_EMB="rope"),
    )
    return S


# ------------------------------------------------------------------ running

def scen_env(extra):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(COMMON_ENV)
    env.update(extra)
    return env


def q(args):
    import shlex
    return " ".join(shlex.quote(a) for a in args)


def build_command(spec, port):
    st = spec["style"]
    if st == "A":
        return ("set -o pipefail; torchrun --nproc-per-node=2 --master-port={} pretrain.py {} "
                "2>&1 | tee train.log".format(port, q(spec["args"])))
    if st == "B":
        return ("torchrun --nproc-per-node=2 --master-port={} --log-dir logs/torchrun "
                "--redirects 3 --tee 3 pretrain.py {} > console.log 2>&1".format(
                    port, q(spec["args"])))
    if st == "D":
        exports = " ".join("{}={}".format(k, v) for k, v in spec["sh"].items())
        return "{} MASTER_PORT={} bash train.sh > train.out 2> train.err".format(exports, port)
    if st == "E":
        return ("set -o pipefail; torchrun --nproc_per_node=2 --rdzv_backend c10d "
                "--rdzv_endpoint=localhost:{} --local-ranks-filter 0 --role rank --tee 3 "
                "pretrain.py {} 2>&1 | tee run.log".format(port, q(spec["args"])))
    if st == "C":
        parts = []
        for node in (0, 1):
            envs = " ".join("{}={}".format(k, v) for k, v in spec["node_env"][node].items())
            parts.append(
                "{} torchrun --nnodes=2 --nproc-per-node=1 --node-rank={} --rdzv-backend=c10d "
                "--rdzv-endpoint=127.0.0.1:{} --rdzv-id=gpt-tiny --local-addr=127.0.0.{} "
                "pretrain.py {} > node{}.log 2>&1 & P{}=$!".format(
                    envs, node, port, node + 1, q(spec["node_args"][node]), node, node))
        return ("{}; sleep 3; {}; wait $P0; R0=$?; wait $P1; R1=$?; "
                "echo \"node0=$R0 node1=$R1\" > .node_rc; exit $(( R0 > R1 ? R0 : R1 ))".format(
                    parts[0], parts[1]))
    raise ValueError(st)


def tagged_pids(tag):
    pids = []
    needle = ("G5_TAG=" + tag).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/{}/environ".format(d), "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


def kill_tag(tag, sig=signal.SIGKILL):
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


class Job:
    def __init__(self, name, spec, port):
        self.name = name
        self.spec = spec
        self.port = port
        self.tag = secrets.token_hex(4)
        self.wd_root = os.path.join(WORK_ROOT, self.tag)
        self.wd = os.path.join(self.wd_root, REPO_NAME)
        self.proc = None
        self.phase = "init"
        self.t0 = None
        self.prep_rc = None
        self.rc = None
        self.timed_out = False
        self.wall = None
        self.cmd = None
        self.error = None

    def env(self):
        e = dict(self.spec.get("env", {}))
        e["G5_TAG"] = self.tag
        e["TMPDIR"] = os.path.join(self.wd_root, "tmp")
        return scen_env(e)

    def prepare(self):
        os.makedirs(os.path.join(self.wd_root, "tmp"), exist_ok=True)
        os.makedirs(self.wd, exist_ok=True)
        for f in CODE_FILES:
            src = os.path.join(HERE, f)
            dst = os.path.join(self.wd, f)
            if os.path.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, dst)
        if not self.spec.get("skip_corpus"):
            make_corpus(self.wd)
        if self.spec.get("setup"):
            self.spec["setup"](self.wd)

    def _popen(self, cmd):
        return subprocess.Popen(["bash", "-c", cmd], cwd=self.wd, env=self.env(),
                                start_new_session=True, stdin=subprocess.DEVNULL)

    def start(self):
        self.prepare()
        if self.spec.get("prep") or self.spec.get("prep_sh"):
            os.makedirs(os.path.join(self.wd, "_prep"), exist_ok=True)
            if self.spec.get("prep"):
                cmd = ("torchrun --nproc-per-node=2 --master-port={} pretrain.py {} "
                       "> _prep/prep.log 2>&1".format(self.port + 1, q(self.spec["prep"])))
            else:
                exports = " ".join("{}={}".format(k, v) for k, v in self.spec["prep_sh"].items())
                cmd = "{} MASTER_PORT={} bash train.sh > _prep/prep.log 2>&1".format(
                    exports, self.port + 1)
            self.prep_cmd = cmd
            self.phase = "prep"
        else:
            self.phase = "main"
            cmd = build_command(self.spec, self.port)
            self.cmd = cmd
        self.t0 = time.time()
        self.proc = self._popen(cmd)

    def poll(self):
        """Returns True when finished."""
        rc = self.proc.poll()
        elapsed = time.time() - self.t0
        limit = PREP_TIMEOUT if self.phase == "prep" else SCEN_TIMEOUT
        if rc is None and elapsed > limit:
            # whole tree: SIGTERM first (torchrun forwards it), then SIGKILL by tag
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            kill_tag(self.tag, signal.SIGTERM)
            time.sleep(5)
            kill_tag(self.tag, signal.SIGKILL)
            rc = self.proc.wait()
            if self.phase == "main":
                self.timed_out = True
        if rc is None:
            return False
        kill_tag(self.tag)  # stragglers left behind by the launcher
        if self.phase == "prep":
            self.prep_rc = rc
            self.prep_wall = elapsed
            if self.spec.get("post_prep"):
                try:
                    self.spec["post_prep"](self.wd)
                except Exception as e:  # noqa: BLE001
                    self.error = "post_prep: {}".format(e)
            self.phase = "main"
            self.cmd = build_command(self.spec, self.port)
            self.t0 = time.time()
            self.proc = self._popen(self.cmd)
            return False
        self.rc = rc
        self.wall = elapsed
        return True

    def collect(self, results):
        dst = os.path.join(results, "gpu5-" + self.name)
        if os.path.exists(dst):
            shutil.rmtree(dst)
        os.makedirs(dst)
        for f in ("train.log", "console.log", "run.log", "node0.log", "node1.log",
                  "train.out", "train.err"):
            p = os.path.join(self.wd, f)
            if os.path.isfile(p):
                shutil.copy2(p, os.path.join(dst, f))
        logs = os.path.join(self.wd, "logs")
        if os.path.isdir(logs):
            shutil.copytree(logs, os.path.join(dst, "logs"), symlinks=True)
        node_rc = os.path.join(self.wd, ".node_rc")
        self.node_rc = open(node_rc).read().strip() if os.path.isfile(node_rc) else None


def versions(meta):
    lines = ["generated: {}".format(datetime.now().isoformat(timespec="seconds")),
             "profile: {}".format(PROFILE), "python: {}".format(sys.version.split()[0])]
    code = ("import torch,sys\n"
            "print('torch:', torch.__version__)\n"
            "print('cuda (torch build):', torch.version.cuda)\n"
            "print('cuda available:', torch.cuda.is_available())\n"
            "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
            "print('gpus:', n)\n"
            "[print('gpu%d: %s' % (i, torch.cuda.get_device_name(i))) for i in range(n)]\n"
            "try:\n    v = torch.cuda.nccl.version()\n"
            "    print('nccl:', '.'.join(map(str, v)) if isinstance(v, tuple) else v)\n"
            "except Exception as e:\n    print('nccl: n/a', e)\n")
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=scen_env({}))
    lines.append(r.stdout.strip() or r.stderr.strip())
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv"], capture_output=True, text=True)
        lines.append("nvidia-smi:\n" + r.stdout.strip())
    with open(os.path.join(meta, "versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    results = os.environ.get("RESULTS")
    if not results:
        sys.exit("set RESULTS=/some/dir")
    results = os.path.abspath(results)
    meta = os.path.join(results, "_meta")
    os.makedirs(meta, exist_ok=True)
    versions(meta)

    all_s = scenarios()
    wanted = sys.argv[1:] or list(all_s)
    for w in wanted:
        if w not in all_s:
            sys.exit("unknown scenario {!r}; known: {}".format(w, ", ".join(all_s)))
    todo = []
    for i, name in enumerate(all_s):
        if name not in wanted:
            continue
        spec = all_s[name]
        if CPU and spec.get("gpu_only"):
            print("[skip] {} (needs CUDA)".format(name), flush=True)
            continue
        todo.append((name, spec, BASE_PORT + 10 * i))
    # exclusive (memory hungry) ones first and alone, then long ones first
    todo.sort(key=lambda t: (not t[1].get("exclusive"), t[1]["style"] != "C"))

    os.makedirs(WORK_ROOT, exist_ok=True)
    run_log = open(os.path.join(meta, "run_log.txt"), "a")
    run_log.write("# {} profile={} scenarios={}\n".format(
        datetime.now().isoformat(timespec="seconds"), PROFILE, " ".join(n for n, _, _ in todo)))
    rows = []
    running = []
    t_start = time.time()
    while todo or running:
        for job in list(running):
            if job.poll():
                running.remove(job)
                job.collect(results)
                row = {"scenario": job.name, "style": job.spec["style"], "exit_code": job.rc,
                       "node_exit_codes": job.node_rc, "wall_s": round(job.wall, 1),
                       "timed_out": job.timed_out, "prep_exit_code": job.prep_rc,
                       "workdir": job.wd, "command": job.cmd, "error": job.error}
                rows.append(row)
                run_log.write(json.dumps(row) + "\n")
                run_log.flush()
                print("[done] {:45s} rc={} {}wall={:.1f}s{}".format(
                    job.name, job.rc, "nodes({}) ".format(job.node_rc) if job.node_rc else "",
                    job.wall, " TIMEOUT" if job.timed_out else ""), flush=True)
        can_start = todo and len(running) < MAX_PAR
        if can_start and todo[0][1].get("exclusive") and running:
            can_start = False
        if can_start and running and running[0].spec.get("exclusive"):
            can_start = False
        if can_start:
            name, spec, port = todo.pop(0)
            job = Job(name, spec, port)
            try:
                job.start()
                running.append(job)
                print("[start] {} (style {}, workdir {})".format(name, spec["style"], job.wd),
                      flush=True)
            except Exception as e:  # noqa: BLE001
                print("[error] {}: {}".format(name, e), flush=True)
                run_log.write(json.dumps({"scenario": name, "error": str(e)}) + "\n")
            continue
        time.sleep(1.0)
    total = time.time() - t_start
    run_log.write("# total wall {:.1f}s\n".format(total))
    run_log.close()
    with open(os.path.join(meta, "runs.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("all done in {:.1f}s -> {}".format(total, results), flush=True)

    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        tar_path = os.path.join(out, "gpu5_samples.tar.gz")
        with tarfile.open(tar_path, "w:gz") as tar:
            tar.add(results, arcname=os.path.basename(results.rstrip("/")))
        print("packed {}".format(tar_path), flush=True)


if __name__ == "__main__":
    main()
