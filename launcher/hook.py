"""The failure hook for EpilogSlurmctld / Epilog / `strigger --fini`: diagnose a failed job where it ran.

SLURM drains a node whose Epilog exits non-zero, so the hook is built to be harmless: the analysis runs
in a child process under a hard timeout, every error is logged and swallowed, and the exit code is 0.
Successful jobs are left alone. Reports are written next to the job's logs, atomically.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from launcher import slurmcmd
from launcher.run import merge_manifest

DEFAULT_TIMEOUT_S = 90
SLURM_TIMEOUT_S = 10
OK_STATES = {"COMPLETED", "PENDING", "RUNNING", "REQUEUED"}
TRANSIENT = {"", "COMPLETING", "RUNNING", "CONFIGURING"}  # at Epilog time scontrol often says COMPLETING


@dataclass(frozen=True)
class JobFacts:
    """What the hook knows about the finished job, from its environment or from scontrol."""

    job_id: str
    name: str = ""
    state: str = ""
    exit_code: str = ""  # "exit:signal", as sacct prints it
    stdout: str = ""
    stderr: str = ""
    workdir: str = ""
    nodes: str = ""
    context: str = ""


def expand_pattern(pattern: str, job_id: str, name: str = "", node: str = "", user: str = "") -> str:
    """SLURM's filename patterns, which hooks receive unexpanded (%j %x %N %u %A %%; %4j pads)."""

    def one(match: re.Match[str]) -> str:
        width, key = match.group(1), match.group(2)
        value = {"j": job_id, "A": job_id, "x": name, "N": node, "u": user, "%": "%"}.get(key, match.group(0))
        return value.zfill(int(width)) if width and value.isdigit() else value

    return re.sub(r"%(\d*)([jAxNu%])", one, pattern)


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job -o ID` is one line of Key=Value pairs (values may not contain spaces here)."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def facts_from_env(env: dict[str, str], argv: list[str]) -> JobFacts:
    """Epilog envs carry SLURM_JOB_*; strigger gives only the job id as $1, so scontrol fills the rest."""
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or (argv[0] if argv else "")
    show = parse_scontrol(slurmcmd.output(["scontrol", "show", "job", "-o", job_id], SLURM_TIMEOUT_S)) if job_id else {}
    exit2 = env.get("SLURM_JOB_EXIT_CODE2") or show.get("ExitCode", "")
    return JobFacts(
        job_id=job_id,
        name=env.get("SLURM_JOB_NAME") or show.get("JobName", ""),
        state=show.get("JobState", "") or _sacct_state(job_id),
        exit_code=exit2,
        stdout=env.get("SLURM_JOB_STDOUT") or show.get("StdOut", ""),
        stderr=env.get("SLURM_JOB_STDERR") or show.get("StdErr", ""),
        workdir=env.get("SLURM_JOB_WORK_DIR") or show.get("WorkDir", ""),
        nodes=env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or show.get("NodeList", ""),
        context=env.get("SLURM_SCRIPT_CONTEXT", "strigger" if argv else ""),
    )


SACCT_RECORD_FIELDS = "JobID,JobName,State,ExitCode,Elapsed,NodeList"


def _sacct_state(job_id: str) -> str:
    lines = slurmcmd.output(["sacct", "-X", "-n", "-P", "-o", "State", "-j", job_id], SLURM_TIMEOUT_S).split()
    return lines[0].rstrip("+") if lines else ""


def failed(facts: JobFacts) -> bool:
    """A non-zero exit, or an end state other than COMPLETED (cancelled, timeout, node failure, OOM)."""
    if facts.exit_code and facts.exit_code not in ("0:0", "0"):
        return True
    return facts.state not in OK_STATES and facts.state not in TRANSIENT


def settle_state(facts: JobFacts, tries: int = 5) -> JobFacts:
    """A clean exit code hides cancellations and timeouts: ask sacct until it records the end state."""
    state = facts.state
    for attempt in range(tries):
        if state not in TRANSIENT:
            break
        time.sleep(0.5 * attempt)
        state = _sacct_state(facts.job_id) or state
    return dataclasses.replace(facts, state=state)


def first_host(nodelist: str) -> str:
    hosts = slurmcmd.output(["scontrol", "show", "hostnames", nodelist], SLURM_TIMEOUT_S).split()
    return hosts[0] if hosts else nodelist.split(",")[0]


def inputs(facts: JobFacts, node: str = "") -> tuple[list[Path], Path | None]:
    """The job's stdout/stderr files and the launcher's `logs/<job>/` folder beside them, when present."""
    files = []
    for pattern in (facts.stdout, facts.stderr):
        if pattern:
            path = Path(expand_pattern(pattern, facts.job_id, facts.name, node))
            if not path.is_absolute() and facts.workdir:
                path = Path(facts.workdir) / path
            if path.is_file() and path not in files:
                files.append(path)
    job_dir = None
    for base in [f.parent for f in files] + ([Path(facts.workdir) / "logs"] if facts.workdir else []):
        if (base / facts.job_id).is_dir():
            job_dir = base / facts.job_id
            break
    return files, job_dir


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="replace")  # a non-UTF-8 log path arrives as surrogate escapes
    os.replace(tmp, path)


def report(facts: JobFacts, node: str = "") -> list[Path]:
    """Analyse the job's logs and write report.md / report.json, and the job's sacct record beside them (so a later
    `diagnose` of the copied logs still knows the end state); returns the files written."""
    from diagnose.api import NoLogsError, analyze
    from diagnose.render.json_report import render_json
    from diagnose.render.markdown import render_markdown

    files, job_dir = inputs(facts, node)
    if job_dir is not None:
        merge_manifest(job_dir, {"SLURM_JOB_ID": facts.job_id, "SLURM_JOB_NAME": facts.name})
    paths = [str(p) for p in files] + ([str(job_dir)] if job_dir else [])
    if not paths:
        log(f"job {facts.job_id}: no log files found (stdout={facts.stdout!r} workdir={facts.workdir!r})")
        return []
    try:
        diagnosis = analyze(paths, job=facts.job_id)
    except NoLogsError as exc:
        log(f"job {facts.job_id}: {exc}")
        return []
    if job_dir is not None:
        md, js, record = job_dir / "report.md", job_dir / "report.json", job_dir / "sacct.txt"
    else:
        stem = files[0].name.rsplit(".", 1)[0]
        md, js = files[0].with_name(f"{stem}.report.md"), files[0].with_name(f"{stem}.report.json")
        record = files[0].with_name(f"{stem}.sacct.txt")
    # the Markdown first: watchers wait for report.json to appear, and both files are there once it has
    write_atomic(md, render_markdown(diagnosis))
    write_atomic(js, render_json(diagnosis) + "\n")
    # the job's record beside its logs: `diagnose` reads it when the logs are looked at later, away from sacct
    saved = slurmcmd.output(["sacct", "-j", facts.job_id, "-P", "-o", SACCT_RECORD_FIELDS], SLURM_TIMEOUT_S)
    if saved.startswith("JobID|"):
        write_atomic(record, saved)
        return [md, js, record]
    return [md, js]


def log(message: str) -> None:
    print(f"[launcher hook {time.strftime('%Y-%m-%dT%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def work(argv: list[str]) -> int:
    """The hook's real work, run in a child so that a hang or a crash cannot outlive the timeout."""
    env = dict(os.environ)
    facts = facts_from_env(env, argv)
    if not facts.job_id:
        log("no job id (neither SLURM_JOB_ID nor an argument): nothing to do")
        return 0
    if facts.exit_code in ("", "0:0", "0"):
        facts = settle_state(facts)
    if not failed(facts):
        log(f"job {facts.job_id}: state={facts.state or '?'} exit={facts.exit_code or '?'}: not a failure, skipped")
        return 0
    node = env.get("SLURMD_NODENAME", "")
    if facts.context == "epilog_slurmd" and node and node != first_host(facts.nodes):
        return 0  # Epilog runs on every node: the first one writes the report
    started = time.monotonic()
    written = report(facts, node)
    log(
        f"job {facts.job_id}: state={facts.state} exit={facts.exit_code}: "
        f"{', '.join(map(str, written)) or 'no report'} in {time.monotonic() - started:.2f}s"
    )
    return 0


def run_bounded(argv: list[str], timeout_s: float | None = None) -> int:
    """Always 0, within `timeout_s`: the worker is killed when it takes longer."""
    limit = timeout_s if timeout_s is not None else float(os.environ.get("LAUNCHER_HOOK_TIMEOUT", DEFAULT_TIMEOUT_S))
    try:
        child = subprocess.Popen([sys.executable, "-m", "launcher", "hook", "--worker", *argv])
        try:
            child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            log(f"analysis took more than {limit:.0f}s: killed; the job's logs are untouched")
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the node
        log(f"hook error: {exc!r}")
    return 0


def stub_script(python: str, log_file: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> str:
    """The executable slurm.conf points at (slurm.conf takes a path, no arguments)."""
    return "\n".join(
        [
            "#!/bin/sh",
            "# launcher failure hook for EpilogSlurmctld=, Epilog= or strigger --fini --program=.",
            "# Always exits 0: a failing Epilog drains the node.",
            f"LAUNCHER_HOOK_TIMEOUT={timeout_s}; export LAUNCHER_HOOK_TIMEOUT",
            f'timeout -k 5 {timeout_s + 15} {shlex.quote(python)} -m launcher hook "$@" '
            f">>{shlex.quote(log_file)} 2>&1 </dev/null",
            "exit 0",
            "",
        ]
    )


def summary(report_json: Path) -> dict[str, object]:
    """The verdict of a written report (for tests and `watch`)."""
    return dict(json.loads(report_json.read_text(encoding="utf-8"))["verdict"])
