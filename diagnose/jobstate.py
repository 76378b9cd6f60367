"""What the scheduler's record of a job says when its logs do not.

A node that died takes its ranks' last lines with it, and a job killed before it printed anything leaves empty
files: the logs then read as `ok` (nothing failed) or as a hang with a silent suspect. sacct still knows the
job's end state (`--job` with sacct on PATH, as the SLURM failure hook runs it), and that state is the cause.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from diagnose.model import Fix, JobInfo, Verdict


@dataclass(frozen=True)
class _StateCause:
    category: str
    subcategory: str | None
    title: str
    explanation: str
    fix: Fix


_STATE_CAUSES: dict[str, _StateCause] = {
    "NODE_FAIL": _StateCause(
        "killed",
        "node_failure",
        "A node of the job failed (sacct: NODE_FAIL)",
        "slurmctld declared a node of the job dead and killed every task; the ranks on it could not log why.",
        Fix(
            "Find why the node failed and resubmit without it",
            "scontrol show node <host> gives its Reason; sbatch --exclude=<host>, then resume from the last checkpoint.",
            "sacct -j {job} -o JobID,State,ExitCode,NodeList,Reason",
        ),
    ),
    "TIMEOUT": _StateCause(
        "killed",
        "time_limit",
        "The job reached its time limit (sacct: TIMEOUT)",
        "SLURM killed every task at the job's --time limit.",
        Fix("Raise --time or checkpoint often enough to resume", "", None),
    ),
    "OUT_OF_MEMORY": _StateCause(
        "killed",
        "host_oom",
        "The job ran out of host memory (sacct: OUT_OF_MEMORY)",
        "The cgroup memory limit was reached and the kernel killed a task.",
        Fix("Ask for more host memory (--mem) or use fewer DataLoader workers", "", None),
    ),
    "CANCELLED": _StateCause(
        "killed",
        "cancel",
        "The job was cancelled (sacct: CANCELLED)",
        "Someone or the scheduler cancelled the job.",
        Fix("Check who cancelled the job", "", "sacct -j {job} -o JobID,State,Reason"),
    ),
    "PREEMPTED": _StateCause(
        "killed",
        "cancel",
        "The job was preempted (sacct: PREEMPTED)",
        "A higher-priority job took the nodes.",
        Fix("Resume from the last checkpoint, or submit to a partition without preemption", "", None),
    ),
    "BOOT_FAIL": _StateCause(
        "killed",
        "node_failure",
        "A node of the job failed to boot (sacct: BOOT_FAIL)",
        "The job never ran: a node it was given failed to start.",
        Fix(
            "Resubmit without the node that failed to boot",
            "Report the node to the cluster admins; sbatch --exclude=<host>.",
            "sacct -j {job} -o JobID,State,NodeList,Reason",
        ),
    ),
    "FAILED": _StateCause(
        "unknown",
        None,
        "SLURM reports the job FAILED, but its logs show no error",
        "The job ended with a non-zero exit code; the failing process printed nothing these logs hold.",
        Fix(
            "Look for the failing process's own output",
            "Its stderr may go to another file (--error, a per-task %t pattern, a torchrun --log-dir).",
            None,
        ),
    ),
}


def with_job_state(verdict: Verdict, job: JobInfo) -> tuple[Verdict, tuple[Fix, ...]]:
    """The logs found nothing (`ok`, or `unknown` with no line to quote) or only a hang, and the scheduler
    recorded why the job ended: report that, with what to do about it. A node failure also explains a hang (its
    ranks stopped answering); a time limit does not (a hung job runs into it), so a hang stays a hang."""
    cause = _STATE_CAUSES.get(job.state or "")
    if cause is None:
        return verdict, ()
    fix = cause.fix
    fixes = (replace(fix, command=fix.command.format(job=job.id)) if fix.command else fix,)
    found_nothing = verdict.category == "ok" or (verdict.category == "unknown" and verdict.exception is None)
    if found_nothing and verdict.category != cause.category:
        detail = f" (exit code {job.exit_code})" if job.exit_code and cause.category == "unknown" else ""
        adjusted = replace(
            verdict,
            category=cause.category,
            subcategory=cause.subcategory,
            title=cause.title + detail,
            confidence="medium",
            explanation=cause.explanation,
        )
        return adjusted, fixes
    if verdict.category == "hang" and cause.subcategory == "node_failure":
        adjusted = replace(
            verdict,
            category=cause.category,
            subcategory=cause.subcategory,
            title=f"{cause.title}; {verdict.title[0].lower()}{verdict.title[1:]}",
            explanation=f"{cause.explanation} {verdict.explanation}".strip(),
        )
        return adjusted, fixes
    return verdict, ()
