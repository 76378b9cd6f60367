"""The scheduler's end state (sacct, via `--job`) where the logs found no cause, on real SLURM runs' files.

Each sample folder keeps the `sacct.txt` its generator saved (`sacct -P -o JobID,JobName,State,ExitCode,...`), so
the state is what the real cluster recorded for that very job.
"""

from __future__ import annotations

from pathlib import Path

from diagnose.api import analyze
from diagnose.jobstate import with_job_state
from diagnose.model import JobInfo
from diagnose.slurm import parse_saved_sacct, saved_job_info

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def _recorded(sample: str) -> JobInfo:
    header, job_line = (SAMPLES / sample / "sacct.txt").read_text().splitlines()[:2]
    row = dict(zip(header.split("|"), job_line.split("|"), strict=True))
    state = row["State"].split()[0]  # "CANCELLED by 0": the state, then who
    return JobInfo(row["JobID"], state, row["ExitCode"], (row["NodeList"],), row["Elapsed"])


def test_a_node_failure_known_only_to_sacct_is_the_cause():
    # the job's stdout alone: the ranks stop mid-training, and the node-failure lines are in the .err file
    out = next((SAMPLES / "slurm-node-failure").glob("slurm-*.out"))
    alone = analyze([str(out)]).verdict
    assert alone.category == "ok"
    verdict, fixes = with_job_state(alone, _recorded("slurm-node-failure"))
    assert (verdict.category, verdict.subcategory) == ("killed", "node_failure")
    assert "NODE_FAIL" in verdict.title
    assert fixes and "--exclude" in fixes[0].detail


def test_a_hang_stays_a_hang_when_the_job_then_ran_out_of_time():
    hang = analyze([str(SAMPLES / "slurm-hang-stalled-rank")]).verdict
    assert hang.category == "hang"
    timed_out = JobInfo("3", "TIMEOUT", "0:0")  # the state slurm-time-limit/sacct.txt records
    assert with_job_state(hang, timed_out) == (hang, ())


def test_a_node_failure_explains_a_hang_and_keeps_its_suspect():
    hang = analyze([str(SAMPLES / "gpu-node-lost")]).verdict
    verdict, _ = with_job_state(hang, _recorded("slurm-node-failure"))
    assert (verdict.category, verdict.subcategory) == ("killed", "node_failure")
    assert (verdict.rank, verdict.ranks) == (hang.rank, hang.ranks)


def test_a_found_cause_is_never_replaced():
    shape = analyze([str(SAMPLES / "slurm-shape-second-node")]).verdict
    assert shape.category == "shape"
    assert with_job_state(shape, _recorded("slurm-hang-stalled-rank")) == (shape, ())


def test_a_clean_completion_changes_nothing():
    ok = analyze([str(SAMPLES / "slurm-ok")]).verdict
    assert with_job_state(ok, _recorded("slurm-ok")) == (ok, ())


def test_a_job_record_saved_with_the_logs_speaks_without_sacct():
    # the logs copied off the cluster: the job's stdout and the sacct record its generator saved, no .err
    folder = SAMPLES / "slurm-node-failure"
    out = next(folder.glob("slurm-*.out"))
    diagnosis = analyze([str(out), str(folder / "sacct.txt")])
    assert (diagnosis.verdict.category, diagnosis.verdict.subcategory) == ("killed", "node_failure")
    assert (diagnosis.job.id, diagnosis.job.state, diagnosis.job.nodes) == (
        _recorded("slurm-node-failure").id,
        "NODE_FAIL",
        ("vm",),
    )


def test_saved_records_give_the_allocations_own_state():
    for folder in sorted(SAMPLES.glob("slurm-*")):
        record = parse_saved_sacct((folder / "sacct.txt").read_text())
        assert record is not None and record.id is not None and "." not in record.id, folder.name
        assert record.state == _recorded(folder.name).state


def test_records_of_two_jobs_choose_none(tmp_path):
    for name in ("slurm-ok", "slurm-time-limit"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sacct.txt").write_bytes((SAMPLES / name / "sacct.txt").read_bytes())
    files = sorted(tmp_path.glob("*/sacct.txt"))
    assert saved_job_info(files, None) is None
    assert saved_job_info(files, "3") == _recorded("slurm-time-limit")
