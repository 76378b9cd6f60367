"""Run torchrun jobs of train.py that end in known ways and collect what each one wrote.

Each job runs in a neutral work directory (work/jobNN: config.json, torchrun-logs/, launcher.out,
launcher.err), so nothing the job prints names its scenario; afterwards launcher.out, launcher.err and
torchrun-logs/ are copied unchanged to RESULTS/gpu-<scenario>/. Jobs of one group run concurrently
(distinct master ports), after the "mem" group (large GPU allocations) has run one job at a time.

    python3 run_all.py --results DIR [--profile gpu|cpu] [--group all|mem|rest] [--layout logdir|console]
                       [SCENARIO ...]

--layout spawn starts the workers with torch.multiprocessing.spawn (spawn_main.py) instead of torchrun, every
process writing to one file, train.log; results go to RESULTS/gpu-spawn-<scenario>/.

--layout filtered runs torchrun as torchtitan's run script does (`--tee 3 --local-ranks-filter 0 --role rank`): one
console file showing only local rank 0's output, its lines prefixed `[rank0]:`; results go to
RESULTS/gpu-filtered-<scenario>/.

--layout nccl-info is --layout console with NCCL_DEBUG=INFO set, as people run while debugging: NCCL's INFO lines
from every rank around the failure; results go to RESULTS/gpu-nccl-info-<scenario>/.

--layout tee runs torchrun with `--tee 3` and nothing else, as many scripts do to see every rank: one console file in
which each worker line carries torchrun's `[defaultN]:` prefix; results go to RESULTS/gpu-tee-<scenario>/.

--layout quiet is --layout logdir without --tee: the workers' output goes only to the log-dir files, the console
holds just the agent's own lines; results go to RESULTS/gpu-quiet-<scenario>/.

--layout rank-files is --layout console with RANK_LOG_DIR set: the script also keeps its own per-rank file,
logs/rank_<RANK>.log (its printed lines and, through logging, a failure's traceback, without torch's `[rankN]:`
prefix), as training scripts with a per-rank FileHandler do; results go to RESULTS/gpu-rank-files-<scenario>/
(train.log and logs/).

--layout console runs torchrun the way many people do (`torchrun ... train.py 2>&1 | tee train.log`): no
--log-dir, no --redirects/--tee, every worker's stdout and stderr and the agent's own lines unprefixed in one
file, train.log; results go to RESULTS/gpu-console-<scenario>/.
"""

import argparse
import contextlib
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

PROFILES = {
    "gpu": dict(vocab=32000, dim=512, heads=8, layers=2, micro_batch=4, seq_len=1024, pad_id=32000),
    "cpu": dict(vocab=1000, dim=64, heads=4, layers=2, micro_batch=2, seq_len=64, pad_id=1000),
}

# GPU-profile sequence lengths that make rank 1's attention scores (4 x 8 x S x S fp32) large:
#   18400: 40.4 GiB per layer; forward needs 3 such blocks, 4 once the freed first one is split by
#          smaller tensors (seen: OOM in the 2nd layer's softmax, 39 GiB reserved but unallocated).
#   26000: 80.6 GiB; the softmax in forward needs a 2nd block.
#   12288: 4.8e9 elements, more than int32 offsets reach.
#   21700: 56.1 GiB; with one layer forward needs 2 such blocks, backward a 3rd.
LONG = {"oom_frag": 18400, "oom_bwd": 21700, "oom_fwd": 26000, "big": 12288}

FAIL_STEP = "4"

CONSOLE_LAYOUTS = ("console", "tee", "filtered", "nccl-info", "rank-files")  # one file holds the whole run

SCENARIOS = {
    # name: (group, config overrides, extra env, extra torchrun args)
    "healthy": ("rest", dict(steps=20, log_every=5, eval_every=10), {}, []),
    "oom-backward-exit": ("mem", dict(layers=1, plan={"1": {FAIL_STEP: {"seq_len": "oom_bwd"}}}), {}, []),
    "oom-backward-hang": (
        "mem",
        dict(layers=1, plan={"1": {FAIL_STEP: {"seq_len": "oom_bwd"}}}, metrics_file="{job}/metrics-rank{rank}.jsonl"),
        {},
        [],
    ),
    "oom-forward": ("mem", dict(plan={"1": {FAIL_STEP: {"seq_len": "oom_fwd"}}}), {}, []),
    "oom-forward-fragmented": ("mem", dict(plan={"1": {FAIL_STEP: {"seq_len": "oom_frag"}}}), {}, []),
    "oom-forward-hang": (
        "mem",
        dict(plan={"1": {FAIL_STEP: {"seq_len": "oom_frag"}}}, metrics_file="{job}/metrics-rank{rank}.jsonl"),
        {},
        [],
    ),
    "shape-exit": ("rest", dict(plan={"1": {FAIL_STEP: {"shard_tokens": "short"}}}), {}, []),
    "shape-hang": (
        "rest",
        dict(plan={"1": {FAIL_STEP: {"shard_tokens": "short"}}}, metrics_file="{job}/metrics-rank{rank}.jsonl"),
        {},
        [],
    ),
    "megatron-world-divisibility": (
        "rest",
        dict(
            megatron=dict(
                tensor_model_parallel_size=2,
                pipeline_model_parallel_size=2,
                num_layers=24,
                hidden_size=2048,
                num_attention_heads=16,
            )
        ),
        {},
        [],
    ),
    "megatron-heads-divisibility": (
        "rest",
        dict(
            megatron=dict(
                tensor_model_parallel_size=2,
                pipeline_model_parallel_size=1,
                num_layers=48,
                hidden_size=1600,
                num_attention_heads=25,
            )
        ),
        {},
        [],
    ),
    "import-missing": ("rest", dict(logger="wandb"), {}, []),
    "desync": ("rest", dict(eval_every=4, plan={"1": {FAIL_STEP: {"val_batches": 0}}}), {}, []),
    "straggler": ("rest", dict(plan={"1": {FAIL_STEP: {"wait_for": "{job}/staged/shard-00004.ready"}}}), {}, []),
    "sigkill": ("rest", dict(plan={"1": {FAIL_STEP: {"preempt": True}}}), {}, []),
    "device-assert": ("rest", dict(plan={"1": {FAIL_STEP: {"pad": 16}}}), {}, []),
    "invalid-address-space": (
        "rest",
        dict(fused_embedding=True, plan={"1": {FAIL_STEP: {"shard_dtype": "uint16"}}}),
        {},
        [],
    ),
    "rendezvous-c10d": ("rest", {}, {}, "rdzv-c10d"),
    "rendezvous-static": ("rest", {}, {}, "rdzv-static"),
    "nccl-ifname": ("rest", {}, {"NCCL_SOCKET_IFNAME": "nonexistent0"}, []),
    "nccl-ifname-debug": ("rest", {}, {"NCCL_SOCKET_IFNAME": "nonexistent0", "NCCL_DEBUG": "INFO"}, []),
    # batch 3 (device run 3)
    "native-crash": ("rest", dict(plan={"1": {FAIL_STEP: {"native_crash": True}}}), {}, []),
    "code-restarted": ("rest", dict(plan={"1": {FAIL_STEP: {"warmup_steps": 0}}}), {}, ["--max-restarts=1"]),
    "early-exit-hang": ("rest", dict(plan={"1": {FAIL_STEP: {"out_of_data": True}}}), {}, []),
    "external-sigterm": ("rest", dict(steps=100000, log_every=10, step_sleep=0.2), {}, []),
    "device-ordinal": ("rest", {}, {"CUDA_VISIBLE_DEVICES": "0"}, []),
    "duplicate-gpu": ("rest", dict(gpu_index=0), {}, []),
    "checkpoint-save-dir": (
        "rest",
        dict(plan={"0": {FAIL_STEP: {"save_to": "/tmp/tinygpt-ckpt/run1/step4.pt"}}}),
        {},
        [],
    ),
    "data-shard-missing": (
        "rest",
        dict(plan={"1": {FAIL_STEP: {"shard_file": "{job}/staged/shard-00004.bin"}}}),
        {},
        [],
    ),
    # batch 4 (device run 4)
    "collective-mismatch": (
        "rest",
        dict(eval_every=4, plan={"1": {FAIL_STEP: {"val_batches": 0}}}),
        {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        [],
    ),
    "monitored-barrier": (
        "rest",
        dict(barrier_every=4, plan={"1": {"3": {"wait_after": "{job}/upload-3.done"}}}),
        {},
        [],
    ),
    "two-nodes-shape": ("rest", dict(plan={"1": {FAIL_STEP: {"shard_tokens": "short"}}}), {}, "two-nodes"),
    # batch 5 (device run 5)
    "fsdp-oom-rank0": ("mem", dict(fsdp=True, plan={"0": {FAIL_STEP: {"seq_len": "oom_fwd"}}}), {}, []),
    "flight-recorder-timeout": (
        "rest",
        dict(plan={"1": {FAIL_STEP: {"wait_for": "{job}/staged/shard-00004.ready"}}}),
        {
            "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/tmp/tinygpt-nccl-trace/rank_",
        },
        [],
    ),
    # batch 6 (device run 6)
    "oom-hogged-gpu": ("mem", dict(plan={"1": {"1": {"leave_free_mib": 64}}}), {}, []),
    "weights-missing-keys": (
        "rest",
        dict(
            plan={
                "0": {"2": {"save_weights_without": ["{job}/export.pt", "ln2"]}},
                "1": {FAIL_STEP: {"reload": "{job}/export.pt"}},
            }
        ),
        {},
        [],
    ),
    # batch 7 (device run 7)
    "dataloader-bad-record": ("rest", dict(loader_bad_index={"1": 13}), {}, []),
    "compile-graph-break": ("rest", dict(plan={"1": {FAIL_STEP: {"compiled_stats": True}}}), {}, []),
    "gather-out-of-bounds": (
        "rest",
        dict(unchecked_embedding=True, plan={"1": {FAIL_STEP: {"token_offset": 2**30}}}),
        {},
        [],
    ),
    # batch 8 (device run 11)
    "gather-size-mismatch": ("rest", dict(gather_numel=4, plan={"1": {FAIL_STEP: {"gather_numel": 5}}}), {}, []),
    "fsdp-frozen-embedding": ("rest", dict(fsdp=True, fsdp_orig_params=False, frozen=["embed"]), {}, []),
    # batch 9 (device run 12)
    "optimizer-groups-resume": (
        "rest",
        dict(
            plan={
                "0": {"2": {"save_optimizer": "{job}/optimizer.pt"}},
                "1": {FAIL_STEP: {"reload_optimizer": "{job}/optimizer.pt"}},
            }
        ),
        {},
        [],
    ),
    "backward-twice": ("rest", dict(plan={"1": {FAIL_STEP: {"backward_again": True}}}), {}, []),
    # batch 10 (device run 13)
    "labels-on-cpu": ("rest", dict(plan={"1": {FAIL_STEP: {"labels_on_cpu": True}}}), {}, []),
    "load-onto-missing-gpu": (
        "rest",
        dict(
            plan={
                "0": {"2": {"save_weights_without": ["{job}/export.pt", "none"]}},
                "1": {FAIL_STEP: {"reload_onto": ["{job}/export.pt", "cuda:3"]}},
            }
        ),
        {},
        [],
    ),
    # batch 11 (device run 14): NCCL settings that do not fit the machine
    "nccl-net-ib-missing": ("rest", {}, {"NCCL_NET": "IB"}, []),
    "nccl-algo-unknown": ("rest", {}, {"NCCL_ALGO": "NoSuchAlgo"}, []),
    # batch 12 (device run 15)
    "ddp-unused-head": ("rest", dict(value_head=True, plan={"1": {FAIL_STEP: {"skip_value_head": True}}}), {}, []),
    "resume-missing-checkpoint": ("rest", dict(resume_from="{job}/checkpoints/latest.pt"), {}, []),
    # batch 13 (device run 16)
    "host-alloc-fail": ("rest", dict(plan={"1": {FAIL_STEP: {"staging_bytes": 2**48}}}), {}, []),
    "flag-on-cpu": ("rest", dict(sync_flags=True, plan={"1": {FAIL_STEP: {"flag_on_cpu": True}}}), {}, []),
    "ddp-model-mismatch": ("rest", dict(value_head_ranks=[1]), {}, []),
    "mesh-too-big": ("rest", dict(mesh_shape=[2, 2]), {}, []),
    # batch 14 (device run 17)
    "dataloader-timeout": ("rest", dict(loader_slow_index={"1": 13}, loader_timeout_s=10), {}, []),
    "anomaly-nan": (
        "rest",
        dict(detect_anomaly=True, plan={"1": {FAIL_STEP: {"logit_scale": True, "logit_scale_divisor": 0.0}}}),
        {},
        [],
    ),
    "activation-dtype": ("rest", dict(hidden_dtype_steps=True, plan={"1": {FAIL_STEP: {"hidden_bf16": True}}}), {}, []),
    # batch 15 (device run 21)
    "nccl-init-oom": ("mem", dict(hog_before_init_mib={"1": 16}), {}, []),
    "flag-on-other-gpu": ("rest", dict(plan={"1": {FAIL_STEP: {"flag_on_gpu0": True}}}), {}, []),
    # batch 16 (device run 22)
    "weights-only-resume": (
        "rest",
        dict(
            plan={
                "0": {"2": {"save_with_state": "{job}/resume.pt"}},
                "1": {FAIL_STEP: {"resume_now": "{job}/resume.pt"}},
            }
        ),
        {},
        [],
    ),
    "vocab-size-mismatch": (
        "rest",
        dict(
            plan={"0": {"2": {"save_shrunk_vocab": "{job}/export.pt"}}, "1": {FAIL_STEP: {"reload": "{job}/export.pt"}}}
        ),
        {},
        [],
    ),
    # batch 17 (device run 23)
    "noncontiguous-collective": ("rest", dict(plan={"1": {FAIL_STEP: {"transposed_stats": True}}}), {}, []),
    "broadcast-bad-source": ("rest", dict(plan={"1": {FAIL_STEP: {"broadcast_from": 2}}}), {}, []),
    "alltoall-uneven-splits": ("rest", dict(plan={"1": {FAIL_STEP: {"uneven_splits": True}}}), {}, []),
    "cuda-graph-sync": ("rest", dict(plan={"1": {FAIL_STEP: {"graph_sync": True}}}), {}, []),
    # batch 18 (device run 24)
    "group-beyond-world": ("rest", dict(tp_group=[0, 1, 2, 3]), {}, []),
    "reentrant-checkpoint-unused": ("rest", dict(reentrant_checkpoint=True, find_unused_parameters=True), {}, []),
    # batch 19 (device run 25)
    "loader-worker-memory-error": ("rest", dict(loader_huge_index={"1": 13}), {}, []),
    "loss-without-grad": ("rest", dict(plan={"1": {FAIL_STEP: {"eval_mode_forward": True}}}), {}, []),
    # batch 20 (device run 26)
    "view-after-transpose": ("rest", dict(plan={"1": {FAIL_STEP: {"view_heads": True}}}), {}, []),
    "sdpa-integer-mask": ("rest", dict(plan={"1": {FAIL_STEP: {"integer_mask": True}}}), {}, []),
    # batch 21 (device run 27)
    "dcp-resume-new-head": (
        "rest",
        dict(
            plan={
                "0": {"2": {"dcp_save": "{job}/dcp/step2"}, FAIL_STEP: {"dcp_load_into_head": "{job}/dcp/step2"}},
                "1": {"2": {"dcp_save": "{job}/dcp/step2"}, FAIL_STEP: {"dcp_load_into_head": "{job}/dcp/step2"}},
            }
        ),
        {},
        [],
    ),
    # batch 22 (device run 28)
    "keyboard-interrupt": ("rest", dict(steps=100000, log_every=10, step_sleep=0.2), {}, []),
    "optimizer-shard-truncated": (
        "rest",
        dict(
            plan={
                "0": {
                    "2": {"save_optimizer_shard": "{job}/optim-rank{rank}.pt"},
                    FAIL_STEP: {"resume_optimizer_shard": "{job}/optim-rank{rank}.pt"},
                },
                "1": {
                    "2": {"save_optimizer_shard": "{job}/optim-rank{rank}.pt", "disk_full": True},
                    FAIL_STEP: {"resume_optimizer_shard": "{job}/optim-rank{rank}.pt"},
                },
            }
        ),
        {},
        [],
    ),
    "oom-eval": ("mem", dict(eval_every=4, plan={"0": {"10000": {"seq_len": "oom_fwd"}}}), {}, []),
    # batch 23 (device run 30)
    "logged-exception": ("rest", dict(log_failures=True, plan={"1": {FAIL_STEP: {"shard_tokens": "short"}}}), {}, []),
    "global-batch-divisibility": ("rest", dict(global_batch=10), {}, []),
    # batch 24 (device run 31)
    "node-lost": ("rest", dict(steps=100000, log_every=10, step_sleep=0.2), {}, "two-nodes"),
}

# Scenarios the generator itself ends: seconds after launch when torchrun's agent gets SIGTERM (as from
# scancel or a time limit).
TERMINATE_AFTER = {"external-sigterm": 40}
# ...and seconds after launch when the whole job's process group gets SIGINT (Ctrl-C in the terminal).
INTERRUPT_AFTER = {"keyboard-interrupt": 30}
# ...and seconds after launch when the second simulated node dies at once (its agent and workers SIGKILLed, as when
# a machine loses power): nothing of it gets to print a word.
NODE_LOST_AFTER = {"node-lost": 30}

GPU_ONLY = {
    "oom-backward-exit",
    "oom-backward-hang",
    "oom-forward",
    "oom-forward-fragmented",
    "oom-forward-hang",
    "invalid-address-space",
    "nccl-ifname",
    "nccl-ifname-debug",
    "device-ordinal",
    "duplicate-gpu",
    "gather-out-of-bounds",
    "fsdp-oom-rank0",
    "flight-recorder-timeout",
    "oom-hogged-gpu",
    "gather-size-mismatch",
    "fsdp-frozen-embedding",
    "labels-on-cpu",
    "load-onto-missing-gpu",
    "nccl-net-ib-missing",
    "nccl-algo-unknown",
    "flag-on-cpu",
    "nccl-init-oom",
    "flag-on-other-gpu",
    "cuda-graph-sync",
    "oom-eval",
}


def kill_tree(pid):
    """SIGKILL a process and all its descendants at once (torchrun starts each worker in a session of its own,
    so killing the agent's process group would leave them running)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def resolve(value, profile, job):
    """Fill the symbolic sizes and {job} paths of a scenario's config."""
    if isinstance(value, dict):
        return {k: resolve(v, profile, job) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, profile, job) for v in value]
    if value in LONG:
        return LONG[value] if profile == "gpu" else PROFILES[profile]["seq_len"] * 2
    if value == "short":
        p = PROFILES[profile]
        return p["micro_batch"] * p["seq_len"] - p["seq_len"] + 24
    if isinstance(value, str) and "{job}" in value:
        return value.replace("{job}", str(job))
    return value


class NodePair:
    """Two torchrun agents (one per simulated node) driven as one job: done when both are done."""

    def __init__(self, procs):
        self.procs = procs
        self.pid = procs[0].pid

    def poll(self):
        codes = [p.poll() for p in self.procs]
        return None if any(c is None for c in codes) else max(codes, key=abs)

    @property
    def returncode(self):
        return self.poll()

    def wait(self):
        for p in self.procs:
            p.wait()

    def signal(self, sig):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, sig)


def launch_two_nodes(name, index, args, job, cfg_env):
    """`--nnodes=2 --nproc-per-node=1`, static rendezvous, one log dir and one console per node; node 1
    on the second GPU."""
    port = 29500 + 10 * index
    procs, files, cmds = [], [], []
    for node in (0, 1):
        node_dir = job / f"node{node}"
        node_dir.mkdir()
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            f"--node-rank={node}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "--log-dir",
            str(node_dir / "torchrun-logs"),
            "--redirects",
            "3",
            "--tee",
            "3",
            str(Path(args.work) / "app" / "train.py"),
        ]
        env = dict(cfg_env)
        if args.profile == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = str(node)
        out, err = open(node_dir / "launcher.out", "w"), open(node_dir / "launcher.err", "w")  # noqa: SIM115 - the job writes to it until finish() closes it
        procs.append(subprocess.Popen(cmd, cwd=node_dir, env=env, stdout=out, stderr=err, start_new_session=True))
        files += [out, err]
        cmds.append(cmd)
    return dict(name=name, job=job, proc=NodePair(procs), start=time.time(), cmd=cmds, files=tuple(files), nodes=True)


def launch(name, index, args):
    group, overrides, extra_env, extra_args = SCENARIOS[name]
    job = Path(args.work) / f"job{index:02d}"
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    cfg = dict(PROFILES[args.profile], steps=8, log_every=1, pg_timeout_s=30)
    cfg.update(resolve(copy.deepcopy(overrides), args.profile, job))
    (job / "config.json").write_text(json.dumps(cfg, indent=1))
    if extra_args == "two-nodes":
        env = dict(os.environ, PYTHONUNBUFFERED="1", TRAIN_CONFIG=str(job / "config.json"), **SAFE_ENV)
        env.update(extra_env)
        return launch_two_nodes(name, index, args, job, env)
    port = 29500 + 10 * index
    if args.layout == "spawn":  # no launcher: the script spawns its own workers
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            TRAIN_CONFIG=str(job / "config.json"),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            **SAFE_ENV,
        )
        env.update(extra_env)
        cmd = [sys.executable, str(Path(args.work) / "app" / "spawn_main.py")]
        out = open(job / "train.log", "w")  # noqa: SIM115 - the job writes to it until finish() closes it
        proc = subprocess.Popen(cmd, cwd=job, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return dict(name=name, job=job, proc=proc, start=time.time(), cmd=cmd, files=(out,), layout="spawn")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    if extra_args == "rdzv-c10d":
        cmd += [
            "--nnodes=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=tinygpt",
            "--rdzv-conf=join_timeout=60",
        ]
    elif extra_args == "rdzv-static":
        cmd += [
            "--nnodes=2",
            "--node-rank=0",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "--rdzv-conf=timeout=60",
        ]
    else:
        cmd += [f"--master-port={port}"] + list(extra_args)
    if args.layout == "logdir":
        cmd += ["--log-dir", str(job / "torchrun-logs"), "--redirects", "3", "--tee", "3"]
    elif args.layout == "quiet":
        cmd += ["--log-dir", str(job / "torchrun-logs"), "--redirects", "3"]
    elif args.layout == "tee":
        cmd += ["--tee", "3"]
    elif args.layout == "filtered":
        cmd += ["--tee", "3", "--local-ranks-filter", "0", "--role", "rank"]
    cmd += [str(Path(args.work) / "app" / "train.py")]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRAIN_CONFIG=str(job / "config.json"), **SAFE_ENV)
    env.update(extra_env)
    if args.layout == "nccl-info":
        env["NCCL_DEBUG"] = "INFO"
    if args.layout == "rank-files":
        env["RANK_LOG_DIR"] = str(job / "logs")
    if args.layout in CONSOLE_LAYOUTS:  # one file, both streams, as `2>&1 | tee train.log` leaves it
        out = open(job / "train.log", "w")  # noqa: SIM115 - the job writes to it until finish() closes it
        proc = subprocess.Popen(cmd, cwd=job, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return dict(name=name, job=job, proc=proc, start=time.time(), cmd=cmd, files=(out,), layout=args.layout)
    out = open(job / "launcher.out", "w")  # noqa: SIM115 - the job writes to it until finish() closes it
    err = open(job / "launcher.err", "w")  # noqa: SIM115 - the job writes to it until finish() closes it
    proc = subprocess.Popen(cmd, cwd=job, env=env, stdout=out, stderr=err, start_new_session=True)
    return dict(name=name, job=job, proc=proc, start=time.time(), cmd=cmd, files=(out, err), layout=args.layout)


def finish(run, args, killed):
    for f in run["files"]:
        f.close()
    if run.get("layout") in CONSOLE_LAYOUTS + ("spawn",):
        dest = Path(args.results) / f"gpu-{run['layout']}-{run['name']}"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.copy2(run["job"] / "train.log", dest / "train.log")
        if (run["job"] / "logs").is_dir():  # --layout rank-files: the script's own per-rank files
            shutil.copytree(run["job"] / "logs", dest / "logs")
        _write_meta(run, args, killed)
        return
    dest = Path(args.results) / (f"gpu-quiet-{run['name']}" if run.get("layout") == "quiet" else f"gpu-{run['name']}")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for source in [run["job"] / "node0", run["job"] / "node1"] if run.get("nodes") else [run["job"]]:
        target = dest / source.name if run.get("nodes") else dest
        target.mkdir(parents=True, exist_ok=True)
        for item in ("launcher.out", "launcher.err"):
            shutil.copy2(source / item, target / item)
        if (source / "torchrun-logs").exists():
            shutil.copytree(source / "torchrun-logs", target / "torchrun-logs", symlinks=True)
    _write_meta(run, args, killed)


def _write_meta(run, args, killed):
    meta = Path(args.results) / "_meta"
    meta.mkdir(exist_ok=True)
    prefix = f"{run['layout']}-" if run.get("layout") in CONSOLE_LAYOUTS + ("spawn", "quiet") else ""
    (meta / f"{prefix}{run['name']}.json").write_text(
        json.dumps(
            dict(
                rc=run["proc"].returncode,
                seconds=round(time.time() - run["start"], 1),
                killed_by_generator=killed,
                cmd=run["cmd"],
                job=str(run["job"]),
            )
        )
    )
    print(
        f"[run_all] {run['name']}: rc={run['proc'].returncode} {time.time() - run['start']:.0f}s killed={killed}",
        flush=True,
    )


def wait_all(runs, args):
    pending = list(runs)
    while pending:
        time.sleep(1)
        for run in list(pending):
            killed = False
            if run["proc"].poll() is None:
                term_at = TERMINATE_AFTER.get(run["name"])
                if term_at is not None and not run.get("terminated") and time.time() - run["start"] > term_at:
                    os.kill(run["proc"].pid, signal.SIGTERM)
                    run["terminated"] = True
                lost_at = NODE_LOST_AFTER.get(run["name"])
                if lost_at is not None and not run.get("node_lost") and time.time() - run["start"] > lost_at:
                    kill_tree(run["proc"].procs[1].pid)
                    run["node_lost"] = True
                int_at = INTERRUPT_AFTER.get(run["name"])
                if int_at is not None and not run.get("interrupted") and time.time() - run["start"] > int_at:
                    os.killpg(run["proc"].pid, signal.SIGINT)
                    run["interrupted"] = True
                if time.time() - run["start"] < args.job_timeout:
                    continue
                if isinstance(run["proc"], NodePair):
                    run["proc"].signal(signal.SIGKILL)
                else:
                    os.killpg(run["proc"].pid, signal.SIGKILL)
                run["proc"].wait()
                killed = True
            finish(run, args, killed)
            pending.remove(run)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--work", default="/tmp/tinygpt")
    ap.add_argument("--profile", choices=list(PROFILES), default="gpu")
    ap.add_argument("--group", choices=["all", "mem", "rest"], default="all")
    ap.add_argument("--job-timeout", type=float, default=200)
    ap.add_argument(
        "--layout",
        choices=["logdir", "quiet", "console", "tee", "spawn", "filtered", "nccl-info", "rank-files"],
        default="logdir",
    )
    ap.add_argument("scenarios", nargs="*")
    args = ap.parse_args()
    names = args.scenarios or [n for n, s in SCENARIOS.items() if args.group in ("all", s[0])]
    if args.profile == "cpu":
        names = [n for n in names if n not in GPU_ONLY]
    app = Path(args.work) / "app"
    app.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "train.py", app / "train.py")
    shutil.copy2(HERE / "spawn_main.py", app / "spawn_main.py")
    index = {n: i + 1 for i, n in enumerate(SCENARIOS)}
    for n in names:  # one at a time, the GPUs to themselves
        if SCENARIOS[n][0] == "mem":
            wait_all([launch(n, index[n], args)], args)
    wait_all([launch(n, index[n], args) for n in names if SCENARIOS[n][0] != "mem"], args)


if __name__ == "__main__":
    main()
