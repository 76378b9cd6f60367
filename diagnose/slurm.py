"""What SLURM knows about a job: state, exit code, nodes, elapsed (from sacct, when it exists, or from a record
saved with the logs).

Text `sacct -P` is read rather than `--json`: Slurm 22.05's JSON reports every normal exit as
{"status": "SUCCESS", "return_code": 0}, even for failed jobs (shared/reference/slurm-local.md §6).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from diagnose.model import JobInfo

SACCT_TIMEOUT_S = 15


def _job_row(job: str, state: str, exit_code: str, nodes: str, elapsed: str) -> JobInfo:
    """One sacct row's fields as sacct prints them (`CANCELLED by 0`, `COMPLETED+`, `None assigned`)."""
    return JobInfo(
        job,
        state.split()[0].rstrip("+") if state.strip() else None,
        exit_code or None,
        tuple(n for n in nodes.split(",") if n) if nodes not in ("", "None assigned") else (),
        elapsed or None,
    )


def parse_sacct(text: str, job: str) -> JobInfo:
    """The job's own line of `sacct -X -n -P -o JobID,State,ExitCode,NodeList,Elapsed`."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job:
            return _job_row(job, parts[1], parts[2], parts[3], parts[4])
    return JobInfo(job)


def parse_saved_sacct(text: str) -> JobInfo | None:
    """A job's record saved next to its logs (`sacct -P -o JobID,...,State,ExitCode,...` with its header line, as
    a failure hook or a generator keeps it): the allocation's own row, the one whose JobID has no step suffix."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("JobID|"):
        return None
    header = lines[0].split("|")
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=False))
        job = row.get("JobID", "")
        if job and "." not in job and row.get("State", "").strip():
            return _job_row(job, row["State"], row.get("ExitCode", ""), row.get("NodeList", ""), row.get("Elapsed", ""))
    return None


_SAVED_RECORD_BYTES = 65536


def saved_job_info(files: Iterable[Path], job: str | None) -> JobInfo | None:
    """The one job record saved among the inputs (`sacct*.txt`, or `<job's stdout>.sacct.txt` as the failure hook
    writes it), for `job` when one is asked for; None when there is none, or records of several jobs and no way to
    choose."""
    records = []
    for path in files:
        if path.name.endswith(".txt") and (path.name.startswith("sacct") or path.name.endswith(".sacct.txt")):
            try:
                with path.open("rb") as handle:
                    text = handle.read(_SAVED_RECORD_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            record = parse_saved_sacct(text)
            if record is not None and (job is None or record.id == job):
                records.append(record)
    return records[0] if len({r.id for r in records}) == 1 else None


def job_info(job: str) -> JobInfo:
    """Best effort: no sacct, no accounting, or a slow controller all give just the id."""
    sacct = shutil.which("sacct")
    if sacct is None:
        return JobInfo(job)
    try:
        done = subprocess.run(
            [sacct, "-X", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode,NodeList,Elapsed"],
            capture_output=True,
            text=True,
            timeout=SACCT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return JobInfo(job)
    return parse_sacct(done.stdout, job) if done.returncode == 0 else JobInfo(job)
