"""Render a JobSpec into the sbatch script the seed guide prescribes, and submit it.

Rendering is a pure function of the spec, so every rule (one srun task per node, the five torchrun
flags, CUDA_DEVICE_MAX_CONNECTIONS) is pinned by unit tests and checked with `bash -n` and shellcheck.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from launcher.spec import BLACKWELL, JobSpec

PREFIX_TEMPLATE = "[${role_name}${local_rank}]:[rank${rank}]:"  # local AND global rank on every teed line
DERIVED_PORT = "$((20000 + SLURM_JOB_ID % 20000))"
SUBMIT_TIMEOUT_S = 60


def cuda_device_max_connections(spec: JobSpec) -> tuple[str | None, str]:
    """The value CUDA_DEVICE_MAX_CONNECTIONS must have (None: leave unset) and why, per the seed's rules."""
    if spec.moe_overlap:
        return "32", "MoE expert-parallel overlap (overlap_moe_expert_parallel_comm) needs 32 connections"
    if spec.gpu == "none" or spec.gpus_per_node == 0:
        return None, "no GPUs: the variable has no effect"
    if spec.gpu in BLACKWELL:
        return None, "Blackwell/GB200 schedules communication without it"
    if spec.fsdp != "none":
        return None, f"FSDP ({spec.fsdp}) must never run with 1"
    if spec.tp > 1 or spec.cp > 1:
        return "1", f"pre-Blackwell ({spec.gpu}) with TP={spec.tp} CP={spec.cp}: comms scheduled before wgrad compute"
    return None, "TP=1 and CP=1: no tensor/context-parallel overlap to order"


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _sbatch_lines(spec: JobSpec) -> list[str]:
    logs = spec.worktree_path / spec.log_root
    lines = [f"#SBATCH --job-name={spec.name}"]
    if spec.account:
        lines.append(f"#SBATCH --account={spec.account}")
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if spec.single_host_nodes:
        lines += ["#SBATCH --nodes=1", f"#SBATCH --ntasks={spec.nodes}"]
    else:
        lines += [f"#SBATCH --nodes={spec.nodes}", "#SBATCH --ntasks-per-node=1"]
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    if spec.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={spec.cpus_per_task}")
    lines += [
        f"#SBATCH --time={spec.time}",
        f"#SBATCH --chdir={spec.worktree_path}",
        f"#SBATCH --output={logs}/%x-%j.out",
        f"#SBATCH --error={logs}/%x-%j.err",
    ]
    lines += [f"#SBATCH {extra}" for extra in spec.sbatch_extra]
    return lines


def _srun_flags(spec: JobSpec) -> list[str]:
    flags = ['--ntasks="$NNODES"']
    if not spec.single_host_nodes:
        flags.append("--ntasks-per-node=1")
    flags.append("--kill-on-bad-exit=0")  # let every node's torchrun finish its own teardown and manifest
    if spec.container.kind == "pyxis":
        flags.append(f"--container-image={_q(spec.container.image)}")
        if spec.container.mounts:
            flags.append(f"--container-mounts={_q(','.join(spec.container.mounts))}")
        flags.append("--container-workdir=" + _q(spec.worktree_path))
    flags += [_q(f) for f in spec.container.flags]
    return flags


def _torchrun_command(spec: JobSpec) -> list[str]:
    prefix: list[str] = []
    if spec.container.kind == "singularity":
        prefix = ["singularity", "exec", "--nv"]
        for mount in spec.container.mounts:
            prefix += ["--bind", mount]
        prefix.append(spec.container.image)
    return [*prefix, *spec.python_command(), "-m", "torch.distributed.run"]


def render(spec: JobSpec) -> str:
    """The complete sbatch script for a spec (pure: the same spec always gives the same text)."""
    cdmc, why = cuda_device_max_connections(spec)
    nnodes = str(spec.nodes) if spec.single_host_nodes else "${SLURM_NNODES}"
    node_rank = "${SLURM_PROCID}" if spec.single_host_nodes else "${SLURM_NODEID}"
    port = str(spec.master_port) if spec.master_port is not None else DERIVED_PORT
    out = [
        "#!/bin/bash",
        "# shellcheck disable=SC2016  # single-quoted $ is literal on purpose: expanded per node or by torchrun",
        *_sbatch_lines(spec),
    ]
    out += [
        "# Rendered by `python -m launcher sbatch`; edit the spec, not this file.",
        "set -euo pipefail",
        f"cd {_q(spec.worktree_path)}",
        "",
        f"export NNODES={nnodes}",
        f"export GPUS_PER_NODE={spec.procs_per_node}  # torchrun --nproc-per-node: one process per GPU",
        "export WORLD_SIZE=$((NNODES * GPUS_PER_NODE))",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export MASTER_ADDR",
        f"export MASTER_PORT={port}",
        f"# CUDA_DEVICE_MAX_CONNECTIONS: {why}",
    ]
    if cdmc is None:
        out.append("unset CUDA_DEVICE_MAX_CONNECTIONS")
    else:
        out.append(f"export CUDA_DEVICE_MAX_CONNECTIONS={cdmc}")
    for key, value in sorted(spec.env.items()):
        out.append(f"export {key}={_q(value)}")
    out += [
        f"export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE={_q(PREFIX_TEMPLATE)}",
        f"export LAUNCHER_PYTHON={_q(spec.launcher_python)}",
        f"export LAUNCHER_SPEC_JSON={_q(spec.to_json())}",
        f'export LAUNCHER_JOB_DIR="{spec.log_root}/${{SLURM_JOB_ID}}"',
        'mkdir -p "$LAUNCHER_JOB_DIR"',
        "",
        "# Preflight on the first node: fails fast with what to change instead of a cryptic rank error.",
        '"$LAUNCHER_PYTHON" -m launcher check --in-job',
        "",
        "TRAIN_ARGS=(",
        *[f"  {_q(a)}" for a in spec.train_args()],
        ")",
        "",
        "# One srun task per node; each starts one torchrun agent with all five rendezvous flags and",
        "# per-rank logs under $LAUNCHER_JOB_DIR/<node_rank>-<host>/ (the manifest maps them to global ranks).",
        "rc=0",
        f"srun {' '.join(_srun_flags(spec))} bash -c '",
        f"  NODE_RANK={node_rank}",
        '  NODE_DIR="$LAUNCHER_JOB_DIR/${NODE_RANK}-$(hostname -s)"',
        '  exec "$LAUNCHER_PYTHON" -m launcher run-node --node-rank="$NODE_RANK" --node-dir="$NODE_DIR" -- \\',
        f"    {' '.join(_q(c) for c in _torchrun_command(spec))} \\",
        '    --nnodes="$NNODES" --nproc-per-node="$GPUS_PER_NODE" --node-rank="$NODE_RANK" \\',
        '    --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" \\',
        '    --log-dir="$NODE_DIR" --redirects=3 --tee=3 \\',
        f'    {_q(spec.entry)} "$@"\' bash "${{TRAIN_ARGS[@]}}" || rc=$?',
        "",
        '"$LAUNCHER_PYTHON" -m launcher manifest "$LAUNCHER_JOB_DIR" >/dev/null || true',
        'exit "$rc"',
    ]
    return "\n".join(out) + "\n"


def submit(script: str, spec: JobSpec) -> str:
    """Submit with `sbatch --parsable` (script on stdin) and return the job id."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise RuntimeError("sbatch not found on PATH: run this on a SLURM login node")
    (Path(spec.worktree_path) / spec.log_root).mkdir(parents=True, exist_ok=True)  # SLURM opens --output there
    done = subprocess.run(
        [sbatch, "--parsable"],
        input=script,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT_S,
        check=False,
        cwd=spec.worktree_path,
    )
    if done.returncode != 0:
        raise RuntimeError(f"sbatch failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip().split(";", 1)[0]
