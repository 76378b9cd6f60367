"""Preflight: the seed's arithmetic and placement rules, checked before an allocation is wasted.

Run as `python -m launcher check SPEC` on the login node and again (`check --in-job`) on the first
node of the job, right before torchrun. Every finding says what to change, not just what is wrong.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from launcher.spec import JobSpec

NODE_LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/scratch/local", "/local")
SHARED_FS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "wekafs", "panfs", "cifs", "smb3", "9p"}
LOCAL_FS = {"tmpfs", "ramfs", "overlay", "devtmpfs"}


@dataclass(frozen=True)
class Finding:
    """One preflight result: `error` stops the job, `warning` is printed and allowed."""

    level: str  # error | warning
    check: str
    message: str  # what is wrong and what to change


def parallelism(spec: JobSpec) -> list[Finding]:
    """WORLD_SIZE = TP x PP x CP x DP and heads % TP (Megatron's TransformerConfig rejects both otherwise)."""
    out = []
    model = spec.tp * spec.pp * spec.cp
    if spec.world_size % model:
        out.append(
            Finding(
                "error",
                "world-size",
                f"WORLD_SIZE {spec.world_size} ({spec.nodes} nodes x {spec.procs_per_node}) is not divisible by "
                f"TP x PP x CP = {spec.tp} x {spec.pp} x {spec.cp} = {model}: change nodes/gpus_per_node to a "
                f"multiple of {model}, or pick tp/pp/cp whose product divides {spec.world_size}",
            )
        )
    heads = spec.heads
    if heads is not None and heads % spec.tp:
        good = [t for t in range(1, heads + 1) if heads % t == 0 and t <= max(spec.procs_per_node, 1)]
        out.append(
            Finding(
                "error",
                "heads",
                f"num_attention_heads {heads} is not divisible by TP {spec.tp}: use tp in {good} "
                f"or a head count that is a multiple of {spec.tp}",
            )
        )
    if spec.gpus_per_node and spec.procs_per_node != spec.gpus_per_node:
        out.append(
            Finding(
                "error",
                "nproc",
                f"nproc_per_node {spec.procs_per_node} != gpus_per_node {spec.gpus_per_node}: torchrun must start "
                "one process per visible GPU; remove nproc_per_node or make them equal",
            )
        )
    return out


def filesystem_type(path: Path, mounts_text: str) -> str | None:
    """The fstype of the longest /proc/mounts mount point containing `path` (pure)."""
    best, fstype = "", None
    resolved = path.as_posix()
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (resolved == point or resolved.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, fstype = point, parts[2]
    return fstype


def placement(path: Path, what: str, spec: JobSpec, mounts_text: str) -> list[Finding]:
    """`what` must be visible from every node: node-local paths break multi-node jobs."""
    if not path.exists():
        return [Finding("error", what, f"{what} {path} does not exist: create it or fix the spec")]
    fstype = filesystem_type(path, mounts_text) or "unknown"
    base = fstype.split(".")[0]
    local = path.as_posix().startswith(NODE_LOCAL_PREFIXES) or base in LOCAL_FS
    multi_host = spec.nodes > 1 and not spec.single_host_nodes
    if local:
        level = "error" if multi_host else "warning"
        return [
            Finding(
                level,
                what,
                f"{what} {path} is node-local ({fstype}): other nodes cannot see it; move it to a shared "
                "filesystem (NFS, Lustre, GPFS) and point the spec at it",
            )
        ]
    if multi_host and base not in SHARED_FS and base != "fuse":
        return [
            Finding(
                "warning",
                what,
                f"{what} {path} is on {fstype}, not a known shared filesystem: make sure every node mounts it",
            )
        ]
    return []


def files(spec: JobSpec, mounts_text: str) -> list[Finding]:
    """Worktree, .venv, entry point and the launcher's own interpreter exist and sit where every node sees them."""
    out = placement(spec.worktree_path, "worktree", spec, mounts_text)
    if not spec.worktree_path.exists():
        return out
    venv_fix = "run `uv sync` in the worktree" if spec.uses_uv() else f"create it: python -m venv {spec.venv_path}"
    if not spec.venv_path.is_dir():
        out.append(Finding("error", "venv", f"{spec.venv_path} does not exist: {venv_fix} before submitting"))
    else:
        out += placement(spec.venv_path, "venv", spec, mounts_text)
    if spec.uses_uv() and shutil.which("uv") is None:
        out.append(Finding("error", "uv", "the worktree uses uv but `uv` is not on PATH: install uv or set runner"))
    entry = spec.worktree_path / spec.entry
    if not entry.is_file():
        out.append(
            Finding("error", "entry", f"entry point {spec.entry} not found in {spec.worktree_path}: fix `entry`")
        )
    launcher_python = Path(spec.launcher_python)
    if not launcher_python.exists():
        out.append(Finding("error", "launcher", f"launcher_python {launcher_python} does not exist"))
    else:
        out += placement(launcher_python, "launcher_python", spec, mounts_text)
    return out


def port_free(port: int, host: str = "") -> bool:
    """True when nothing listens on `port` here (bind test: the same thing torch's TCPStore will do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE and exc.errno != errno.EACCES
    return True


def port(value: int | None, level: str) -> list[Finding]:
    if value is None or port_free(value):
        return []
    return [
        Finding(
            level,
            "port",
            f"MASTER_PORT {value} is already in use on {socket.gethostname()}: set master_port to a free port "
            "or master_port = 'auto' (derived from the job id)",
        )
    ]


def visible_gpus(env: dict[str, str]) -> int | None:
    """GPUs this process can see: CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`, else None (unknown)."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU ")) if done.returncode == 0 else None


def gpus(spec: JobSpec, env: dict[str, str]) -> list[Finding]:
    if not spec.gpus_per_node:
        return []
    seen = visible_gpus(env)
    if seen is None or seen == spec.procs_per_node:
        return []
    return [
        Finding(
            "error",
            "gpus",
            f"this node sees {seen} GPU(s) but nproc_per_node is {spec.procs_per_node}: set gpus_per_node = {seen} "
            "or request the GPUs you launch on (--gpus-per-node)",
        )
    ]


def run_all(spec: JobSpec, *, in_job: bool = False) -> list[Finding]:
    """Every preflight check; in a job also the visible GPUs and the actual MASTER_PORT on this node."""
    try:
        mounts_text = Path("/proc/mounts").read_text(encoding="utf-8")
    except OSError:
        mounts_text = ""
    out = parallelism(spec) + files(spec, mounts_text)
    if in_job:
        env = dict(os.environ)
        out += gpus(spec, env)
        master_port = env.get("MASTER_PORT", "")
        out += port(int(master_port) if master_port.isdigit() else spec.master_port, "error")
    else:  # the login node is not the master node: only a hint there
        out += port(spec.master_port, "warning")
    return out
