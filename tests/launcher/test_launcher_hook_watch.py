"""Failure hook and watch: pure parts (patterns, state rules, GPU-minutes) and the hook on real logs."""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnose.api import analyze
from launcher import hook, watch

REPO = Path(__file__).parents[2]


def test_expand_pattern_substitutes_what_slurm_leaves_for_hooks():
    assert hook.expand_pattern("/w/logs/%x-%j.out", "12", "gpt") == "/w/logs/gpt-12.out"
    assert hook.expand_pattern("slurm-%8j-%N.err", "12", node="n1") == "slurm-00000012-n1.err"
    assert hook.expand_pattern("100%%-%A", "7") == "100%-7"


@pytest.mark.parametrize(
    ("state", "exit_code", "failed"),
    [
        ("COMPLETED", "0:0", False),
        ("COMPLETING", "1:0", True),
        ("FAILED", "1:0", True),
        ("CANCELLED", "0:0", True),
        ("TIMEOUT", "0:0", True),
        ("COMPLETING", "0:0", False),  # unknown yet: settle_state asks sacct first
        ("", "0:9", True),
    ],
)
def test_which_jobs_get_a_report(state, exit_code, failed):
    assert hook.failed(hook.JobFacts("1", state=state, exit_code=exit_code)) is failed


def test_scontrol_line_parses_to_fields():
    fields = hook.parse_scontrol("JobId=7 JobName=e2e JobState=FAILED StdOut=/w/logs/e2e-7.out ExitCode=1:0")
    assert fields["StdOut"] == "/w/logs/e2e-7.out" and fields["ExitCode"] == "1:0"


def test_stub_script_always_exits_zero_within_its_timeout(tmp_path: Path):
    text = hook.stub_script("/venv/bin/python", "/var/log/hook.log", 30)
    assert text.startswith("#!/bin/sh\n") and text.rstrip().endswith("exit 0")
    assert "timeout -k 5 45 /venv/bin/python -m launcher hook" in text


def test_hook_writes_reports_beside_a_failed_jobs_logs(tmp_path: Path, monkeypatch):
    sample = REPO / "sample_logs" / "slurm-shape-second-node"
    if not sample.is_dir():
        pytest.skip("sample_logs/slurm-shape-second-node not present")
    logs = tmp_path / "logs"
    shutil.copytree(sample, logs)
    out = next(logs.glob("slurm-*.out"))
    job = out.stem.split("-", 1)[1]
    monkeypatch.setattr(
        hook.slurmcmd, "output", lambda cmd, timeout_s=0: ""
    )  # no scontrol/sacct: the Epilog env is enough
    facts = hook.JobFacts(
        job, state="FAILED", exit_code="1:0", stdout=str(logs / "slurm-%j.out"), stderr=str(logs / "slurm-%j.err")
    )
    written = hook.report(facts)
    assert [p.name for p in written] == [f"slurm-{job}.report.md", f"slurm-{job}.report.json"]
    verdict = hook.summary(written[1])
    expected = (sample / "expected.toml").read_text()
    assert f'category = "{verdict["category"]}"' in expected


def test_hook_skips_successful_jobs_and_never_fails(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(hook.slurmcmd, "output", lambda cmd, timeout_s=0: "")
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("SLURM_JOB_EXIT_CODE2", "0:0")
    monkeypatch.setenv("SLURM_JOB_STDOUT", str(tmp_path / "x-%j.out"))
    monkeypatch.setattr(hook, "_sacct_state", lambda job: "COMPLETED")
    assert hook.work([]) == 0
    assert not list(tmp_path.iterdir())
    started = time.monotonic()
    assert hook.run_bounded(["not-a-job"], timeout_s=0.01) == 0  # killed at once, still 0
    assert time.monotonic() - started < 10


def test_gpu_minutes_saved_counts_the_rest_of_the_collective_timeout():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert watch.gpu_minutes_saved(8, 600, now - timedelta(seconds=60), now) == pytest.approx(72.0)
    assert watch.gpu_minutes_saved(8, 600, now - timedelta(seconds=700), now) == 0
    assert watch.gpu_minutes_saved(4, 120, None, now) == pytest.approx(8.0)


def test_squeue_and_sacct_lines_parse():
    running = watch.parse_squeue("12|RUNNING|1:02|vm|vm\n", "12")
    assert running == watch.JobStatus("12", "RUNNING", "1:02", "vm", "vm") and not running.done
    done = watch.parse_sacct("12|CANCELLED by 0|00:00:11|vm|0:0\n", "12")
    assert done is not None and done.state == "CANCELLED" and done.done
    assert watch.parse_squeue("", "12") is None


def test_report_json_is_the_public_contract(tmp_path: Path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"verdict": {"category": "code", "rank": 3}}))
    assert hook.summary(path) == {"category": "code", "rank": 3}


def test_watch_cancels_as_soon_as_the_artifact_lands(tmp_path: Path, monkeypatch):
    artifact = tmp_path / "iter_0001000" / "done"
    polls: list[str] = []
    cancelled: list[str] = []

    def fake_status(job: str) -> watch.JobStatus:
        polls.append(job)
        if len(polls) == 3:  # training writes its final checkpoint while the job still runs
            artifact.parent.mkdir()
            artifact.write_text("")
        return watch.JobStatus(job, "RUNNING", "0:10", "vm")

    monkeypatch.setattr(watch, "status", fake_status)
    monkeypatch.setattr(watch, "scancel", lambda job: cancelled.append(job) or True)
    result = watch.watch("12", artifact=artifact, interval_s=0)
    assert result.action == "artifact" and cancelled == ["12"] and len(polls) == 3


def test_hook_saves_the_jobs_record_for_later_reading(tmp_path: Path, monkeypatch):
    sample = REPO / "sample_logs" / "slurm-node-failure"
    logs = tmp_path / "logs"
    logs.mkdir()
    out = next(sample.glob("slurm-*.out"))
    shutil.copy2(out, logs / out.name)  # the job's stdout only: the node-failure lines went to its .err
    job = out.stem.split("-", 1)[1]
    recorded = (sample / "sacct.txt").read_text()  # what sacct printed for this job on the real cluster
    monkeypatch.setattr(hook.slurmcmd, "output", lambda cmd, timeout_s=0: recorded if cmd[:1] == ["sacct"] else "")
    facts = hook.JobFacts(job, state="NODE_FAIL", exit_code="0:0", stdout=str(logs / "slurm-%j.out"))
    written = hook.report(facts)
    assert [p.name for p in written] == [f"slurm-{job}.report.md", f"slurm-{job}.report.json", f"slurm-{job}.sacct.txt"]
    later = analyze([str(logs)]).verdict  # away from the cluster: no --job, no sacct
    assert (later.category, later.subcategory) == ("killed", "node_failure")
