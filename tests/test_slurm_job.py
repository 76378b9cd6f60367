"""`--job` against the real local SLURM cluster (tests/slurm/local-slurm.sh): sacct facts in the report."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from diagnose.api import analyze
from diagnose.slurm import job_info

pytestmark = pytest.mark.skipif(shutil.which("sbatch") is None, reason="no SLURM here (tests/run.sh starts one)")


def _wait_until_done(job: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(0.5)
    pytest.fail(f"job {job} still running after {timeout_s}s")


def _finished_job(tmp_path, command: str) -> str:
    job = (
        subprocess.run(
            ["sbatch", "--parsable", "--job-name=t", f"--output={tmp_path}/slurm-%j.out", "--wrap", command],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        )
        .stdout.strip()
        .split(";")[0]
    )
    _wait_until_done(job)
    for _ in range(40):  # accounting lands a moment after the job leaves the queue
        if job_info(job).state:
            break
        time.sleep(0.5)
    return job


def test_failed_job_state_and_exit_code_come_from_sacct(tmp_path):
    job = _finished_job(tmp_path, "exit 3")
    info = job_info(job)
    assert (info.id, info.state, info.exit_code) == (job, "FAILED", "3:0")
    assert info.nodes and info.elapsed


def test_a_job_that_failed_without_a_word_is_not_reported_ok(tmp_path):
    job = _finished_job(tmp_path, "echo 'iteration 1'; exit 3")
    diagnosis = analyze([str(tmp_path)], job=job)
    assert diagnosis.verdict.category == "unknown"
    assert "FAILED" in diagnosis.verdict.title and "3:0" in diagnosis.verdict.title
    assert diagnosis.fixes


def test_unknown_job_gives_only_its_id():
    info = job_info("999999")
    assert (info.id, info.state, info.exit_code) == ("999999", None, None)
