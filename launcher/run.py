"""The per-node wrapper srun starts on every node: runs torchrun, records who ran what, where.

torchrun's --log-dir tree names only LOCAL ranks and its summaries say `host: localhost`; this wrapper
writes `<node_dir>/node.json` (host, node rank, local -> global ranks, the exact command, MASTER_ADDR/PORT
as this node saw them, times, exit code, attempts) and merges every node's record into the job's
`manifest.json`, the file `diagnose` reads to put a host and a global rank on every log line.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

SCHEMA = "launcher-manifest/1"
NODE_FILE = "node.json"
MANIFEST = "manifest.json"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def flag_value(command: list[str], flag: str) -> str | None:
    """`--flag=value` or `--flag value` from a torchrun command line."""
    for i, arg in enumerate(command):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
    return None


def local_to_global(node_rank: int, nproc: int) -> dict[str, int]:
    """torchrun's static rendezvous numbers ranks node by node: global = node_rank * nproc + local."""
    return {str(local): node_rank * nproc + local for local in range(nproc)}


def count_attempts(node_dir: Path) -> int:
    """torchrun makes one `<run>/attempt_N/` per (re)start of the workers."""
    return len({p.name for p in node_dir.glob("*/attempt_*") if p.is_dir()})


def node_record(node_rank: int, node_dir: Path, command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """What this node knows before torchrun starts (pure apart from the hostname)."""
    nproc = int(flag_value(command, "--nproc-per-node") or flag_value(command, "--nproc_per_node") or 1)
    port = env.get("MASTER_PORT", flag_value(command, "--master-port") or "")
    return {
        "node_rank": node_rank,
        "host": socket.gethostname().split(".")[0],
        "log_dir": node_dir.name,
        "local_to_global": local_to_global(node_rank, nproc),
        "master_addr": env.get("MASTER_ADDR", flag_value(command, "--master-addr")),
        "master_port": int(port) if str(port).isdigit() else None,
        "slurm_procid": env.get("SLURM_PROCID"),
        "slurm_nodeid": env.get("SLURM_NODEID"),
        "command": command,
        "worktree": os.getcwd(),
        "venv": env.get("VIRTUAL_ENV") or _venv_of(command),
        "start": now(),
        "end": None,
        "exit_code": None,
        "attempts": 0,
        "pid": os.getpid(),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic replace: a reader (diagnose, the hook, another node merging) never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def build_manifest(job_dir: Path, nodes: list[dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    """The job's manifest from every node record found (pure)."""
    nodes = sorted(nodes, key=lambda n: (n.get("node_rank", 0), n.get("host", "")))
    first = nodes[0] if nodes else {}
    return {
        "schema": SCHEMA,
        "job_id": env.get("SLURM_JOB_ID") or job_dir.name,
        "job_name": env.get("SLURM_JOB_NAME"),
        "hosts": sorted({n["host"] for n in nodes if n.get("host")}),
        "command": first.get("command", []),
        "worktree": first.get("worktree"),
        "venv": first.get("venv"),
        "world_size": sum(len(n.get("local_to_global", {})) for n in nodes),
        "nodes": nodes,
        "updated": now(),
    }


def _venv_of(command: list[str]) -> str | None:
    for arg in command:
        if arg.endswith("/bin/python") or "/bin/python3" in arg:
            return str(Path(arg).parent.parent)
    return str(Path.cwd() / ".venv") if (Path.cwd() / ".venv").is_dir() else None


def merge_manifest(job_dir: Path, env: dict[str, str] | None = None) -> Path:
    """Merge every `*/node.json` under the job folder into `manifest.json` (any node, any time)."""
    env = dict(os.environ) if env is None else env
    nodes = []
    for path in sorted(job_dir.glob(f"*/{NODE_FILE}")):
        try:
            nodes.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a node still writing: the next merge picks it up
    out = job_dir / MANIFEST
    previous: dict[str, Any] = {}
    if out.exists():
        try:
            previous = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
    manifest = build_manifest(job_dir, nodes, env)
    for key in ("job_id", "job_name"):  # the hook merges outside the job, where SLURM_JOB_* may be absent
        manifest[key] = previous.get(key) or manifest.get(key)
    write_json(out, manifest)
    return out


def run_node(node_rank: int, node_dir: Path, command: list[str]) -> int:
    """Run torchrun (the command), forwarding SIGTERM/SIGINT, and keep node.json and manifest.json current."""
    node_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    record = node_record(node_rank, node_dir, command, env)
    record_path = node_dir / NODE_FILE
    write_json(record_path, record)
    merge_manifest(node_dir.parent, env)
    sys.stdout.flush()
    child = subprocess.Popen(command)

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    code = child.wait()
    record.update(end=now(), exit_code=code, attempts=count_attempts(node_dir))
    write_json(record_path, record)
    merge_manifest(node_dir.parent, env)
    return code if code >= 0 else 128 - code
