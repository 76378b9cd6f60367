"""What SLURM knows about a job: state, exit code, nodes, elapsed (from sacct, when it exists).

Text `sacct -P` is read rather than `--json`: Slurm 22.05's JSON reports every normal exit as
{"status": "SUCCESS", "return_code": 0}, even for failed jobs (shared/reference/slurm-local.md §6).
"""

from __future__ import annotations

import shutil
import subprocess

from diagnose.model import JobInfo

SACCT_TIMEOUT_S = 15


def parse_sacct(text: str, job: str) -> JobInfo:
    """The job's own line of `sacct -X -n -P -o JobID,State,ExitCode,NodeList,Elapsed`."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job:
            state = parts[1].split()[0].rstrip("+") if parts[1] else None
            nodes = tuple(n for n in parts[3].split(",") if n) if parts[3] not in ("", "None assigned") else ()
            return JobInfo(job, state or None, parts[2] or None, nodes, parts[4] or None)
    return JobInfo(job)


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
