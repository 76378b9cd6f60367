"""Follow a job: state from squeue/sacct, artifact polling, and cancel-on-failure.

The seed's advice: poll what the training writes rather than only the job state, and `scancel` as
soon as it lands. Likewise, once one rank has died with a real error, the other ranks only wait for
their collective timeout: cancelling then gives the allocation back early, and we say how much.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from launcher import slurmcmd
from launcher.hook import parse_scontrol

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL"}
UNCERTAIN = {"ok", "unknown", "hang"}
CMD_TIMEOUT_S = 15


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    elapsed: str = ""
    nodes: str = ""
    reason: str = ""
    exit_code: str = ""

    @property
    def done(self) -> bool:
        return self.state in TERMINAL


def parse_squeue(text: str, job_id: str) -> JobStatus | None:
    """`squeue -h -j ID -o '%i|%T|%M|%N|%R'`; empty once the job has left the queue."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobStatus(job_id, parts[1], parts[2], parts[3], parts[4])
    return None


def parse_sacct(text: str, job_id: str) -> JobStatus | None:
    """`sacct -X -n -P -o JobID,State,Elapsed,NodeList,ExitCode` (text: 22.05's JSON loses exit codes)."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobStatus(job_id, parts[1].split()[0].rstrip("+"), parts[2], parts[3], "", parts[4])
    return None


def status(job_id: str) -> JobStatus:
    """squeue while the job is queued or running, sacct after; UNKNOWN when neither knows it."""
    found = parse_squeue(slurmcmd.output(["squeue", "-h", "-j", job_id, "-o", "%i|%T|%M|%N|%R"]), job_id)
    if found is not None and found.state not in TERMINAL:
        return found
    sacct = slurmcmd.output(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,Elapsed,NodeList,ExitCode"])
    return parse_sacct(sacct, job_id) or found or JobStatus(job_id, "UNKNOWN")


def job_dir(job_id: str) -> Path | None:
    """The launcher's `logs/<job>/` folder, found from the job's StdOut or WorkDir."""
    show = parse_scontrol(slurmcmd.output(["scontrol", "show", "job", "-o", job_id]))
    for base in (Path(show.get("StdOut", "")).parent, Path(show.get("WorkDir", "")) / "logs"):
        if show and (base / job_id).is_dir():
            return base / job_id
    return None


def scancel(job_id: str) -> bool:
    return subprocess.run(["scancel", job_id], capture_output=True, timeout=CMD_TIMEOUT_S, check=False).returncode == 0


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.astimezone()  # naive log times are this machine's local time


def gpu_minutes_saved(ranks: int, collective_timeout_s: float, root_time: datetime | None, now: datetime) -> float:
    """GPU time the waiting ranks would have burnt until their collective timeout fired (pure)."""
    started = root_time or now
    left = max(0.0, collective_timeout_s - (now - started).total_seconds())
    return ranks * left / 60


@dataclass(frozen=True)
class RootCause:
    category: str
    rank: int | None
    title: str
    time: str | None
    world: int | None


def certain_root(logs: Path) -> RootCause | None:
    """A definite root cause in the logs so far (a real error on a known rank), else None."""
    from diagnose.api import NoLogsError, analyze

    try:
        diagnosis = analyze([str(logs)])
    except NoLogsError:
        return None
    verdict = diagnosis.verdict
    if verdict.category in UNCERTAIN or verdict.rank is None or verdict.confidence not in ("high", "medium"):
        return None
    return RootCause(verdict.category, verdict.rank, verdict.title, verdict.time, diagnosis.ranks.expected)


def _fingerprint(logs: Path) -> tuple[int, float]:
    files = [p for p in logs.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_mtime + p.stat().st_size for p in files)


@dataclass(frozen=True)
class WatchResult:
    status: JobStatus
    action: str  # finished | artifact | cancelled-on-failure
    message: str


def watch(
    job_id: str,
    *,
    artifact: Path | None = None,
    cancel_on_failure: bool = False,
    logs: Path | None = None,
    interval_s: float = 2.0,
    collective_timeout_s: float = 600.0,
    gpus: int | None = None,
    on_status: Callable[[JobStatus, str], None] = lambda s, note: None,
) -> WatchResult:
    """Poll until the job ends, its artifact lands, or (optionally) a certain root cause shows up."""
    seen: tuple[int, float] | None = None
    while True:
        current = status(job_id)
        on_status(current, "")
        if artifact is not None and artifact.exists():
            if not current.done:
                scancel(job_id)
            return WatchResult(current, "artifact", f"{artifact} landed: cancelled job {job_id} to free its nodes")
        if current.done:
            return WatchResult(current, "finished", f"job {job_id} ended {current.state} {current.exit_code}".strip())
        if cancel_on_failure and current.state == "RUNNING":
            logs = logs or job_dir(job_id)
            fingerprint = _fingerprint(logs) if logs is not None and logs.is_dir() else None
            if logs is not None and fingerprint is not None and fingerprint != seen:
                seen = fingerprint
                root = certain_root(logs)
                if root is not None:
                    now = datetime.now(UTC)
                    ranks = gpus or root.world or 1
                    saved = gpu_minutes_saved(ranks, collective_timeout_s, _parse_time(root.time), now)
                    scancel(job_id)
                    on_status(current, f"cancelled: {root.title}")
                    return WatchResult(
                        status(job_id),
                        "cancelled-on-failure",
                        f"{root.title} [{root.category}]: cancelled job {job_id} while the other ranks waited; "
                        f"{saved:.1f} GPU-minutes saved ({ranks} GPUs x up to {collective_timeout_s:.0f}s "
                        "collective timeout)",
                    )
        time.sleep(interval_s)
