"""End to end on the real local SLURM cluster (tests/slurm/local-slurm.sh): spec -> sbatch -> a CPU
torch/gloo job of 2 nodes x 2 ranks whose global rank 3 (second node) fails -> the failure hook's report
names rank 3; `watch --cancel-on-failure` cancels a job whose other ranks wait; a clean job gets no report.

The test cluster has one machine, so the spec sets `single_host_nodes`: the two "nodes" are two srun
tasks there, each running its own torchrun agent exactly as on two hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.hook import stub_script

pytestmark = pytest.mark.skipif(shutil.which("sbatch") is None, reason="sbatch not installed: no SLURM cluster here")

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
SLURM_DIR = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/local-slurm"))
HOOK = SLURM_DIR / "hooks" / "launcher_hook.sh"
HOOK_LOG = SLURM_DIR / "log" / "launcher-hook.log"
JOB_TIMEOUT_S = 180

SPEC = """
name = "{name}"
nodes = 2
gpus_per_node = 0
nproc_per_node = 2
cpus_per_task = 1
gpu = "none"
time = "00:05:00"
entry = "train_fail.py"
parallel_args = false
runner = "python"
master_port = "auto"
single_host_nodes = true
env = {{ FAIL_RANK = "{fail_rank}", SURVIVORS = "{survivors}", TIMEOUT_S = "{timeout}", OMP_NUM_THREADS = "1" }}
"""


def _launcher(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _hook_configured() -> bool:
    done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    return any(line.split("=", 1)[-1].strip() == str(HOOK) for line in done.stdout.splitlines() if "Epilog" in line)


@pytest.fixture(scope="module")
def hook_mode() -> str:
    """Point EpilogSlurmctld at the launcher hook (restarts slurmctld once); strigger when that is refused."""
    HOOK.parent.mkdir(parents=True, exist_ok=True)
    HOOK.write_text(stub_script(sys.executable, str(HOOK_LOG), 60))
    HOOK.chmod(0o755)
    if _hook_configured():
        return "EpilogSlurmctld"
    env = dict(os.environ, LOCAL_SLURM_EPILOG_SLURMCTLD=str(HOOK))
    up = subprocess.run(
        ["bash", str(REPO / "tests/slurm/local-slurm.sh"), "up"], env=env, capture_output=True, text=True, timeout=300
    )
    if up.returncode == 0 and _hook_configured():
        return "EpilogSlurmctld"
    print(f"EpilogSlurmctld not configurable now ({up.stderr.strip()[-200:]}); using strigger --fini")
    return "strigger"


def _submit(tmp: Path, name: str, hook_mode: str, fail_rank: int, survivors: str = "collective", timeout: int = 20):
    worktree = tmp / name
    worktree.mkdir()
    (worktree / "train_fail.py").write_text((HERE / "train_fail.py").read_text())
    (worktree / ".venv").symlink_to(Path(sys.prefix))
    spec = SPEC.format(name=name, fail_rank=fail_rank, survivors=survivors, timeout=timeout)
    (worktree / "job.toml").write_text(spec)
    rendered = _launcher("sbatch", "job.toml", cwd=worktree)
    assert rendered.returncode == 0, rendered.stderr
    (worktree / "job.sbatch").write_text(rendered.stdout)
    done = _launcher("submit", "job.toml", cwd=worktree)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    if hook_mode == "strigger":
        subprocess.run(["strigger", "--set", f"--jobid={job}", "--fini", f"--program={HOOK}"], check=True)
    return job, worktree


def _sacct(job: str, fields: str = "State") -> str:
    done = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", fields], capture_output=True, text=True)
    return done.stdout.strip()


def _wait_done(job: str, timeout: float = JOB_TIMEOUT_S) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _sacct(job).split(" ")[0]
        if state and state not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"):
            return state
        time.sleep(0.5)
    subprocess.run(["scancel", job])
    pytest.fail(f"job {job} did not finish within {timeout}s")


def _wait_file(path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return time.time()
        time.sleep(0.2)
    log = HOOK_LOG.read_text()[-2000:] if HOOK_LOG.exists() else "(no hook log)"
    pytest.fail(f"{path} not written within {timeout}s; hook log:\n{log}")


@pytest.fixture(scope="module")
def jobs(hook_mode: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, Path]]]:
    """Three jobs submitted at once (the cluster advertises 8 CPUs; each takes 2) to keep the suite short."""
    tmp = tmp_path_factory.mktemp("launcher-e2e")
    submitted = {
        "fail": _submit(tmp, "fail", hook_mode, fail_rank=3),
        "wait": _submit(tmp, "wait", hook_mode, fail_rank=3, survivors="wait", timeout=150),
        "ok": _submit(tmp, "ok", hook_mode, fail_rank=-1),
    }
    yield submitted
    for job, _ in submitted.values():
        subprocess.run(["scancel", job], capture_output=True)


def test_rendered_script_is_what_ran(jobs):
    job, worktree = jobs["fail"]
    script = subprocess.run(["scontrol", "write", "batch_script", job, "-"], capture_output=True, text=True)
    if script.returncode == 0 and script.stdout:
        assert script.stdout == (worktree / "job.sbatch").read_text()


def test_hook_reports_the_failing_rank_of_the_second_node(jobs, hook_mode):
    job, worktree = jobs["fail"]
    assert _wait_done(job) == "FAILED"
    ended = time.time()
    job_dir = worktree / "logs" / job
    landed = _wait_file(job_dir / "report.json", 60 if hook_mode == "strigger" else 30)
    print(f"hook ({hook_mode}) report {landed - ended:.1f}s after sacct showed the end")
    report = json.loads((job_dir / "report.json").read_text())
    assert report["verdict"]["rank"] == 3, report["verdict"]
    assert report["verdict"]["category"] == "code"
    assert "simulated failure on rank 3" in report["verdict"]["exception"]
    assert (job_dir / "report.md").read_text().startswith("**")
    manifest = json.loads((job_dir / "manifest.json").read_text())
    assert manifest["schema"] == "launcher-manifest/1" and manifest["job_id"] == job
    second = next(n for n in manifest["nodes"] if n["node_rank"] == 1)
    assert second["local_to_global"] == {"0": 2, "1": 3} and second["exit_code"] == 1
    assert all(n["end"] and n["master_port"] == manifest["nodes"][0]["master_port"] for n in manifest["nodes"])
    stderr = (worktree / "logs" / f"fail-{job}.err").read_text()
    assert "[default1]:[rank3]:" in stderr  # the tee'd line prefix carries the global rank


def test_watch_cancels_a_job_whose_other_ranks_wait(jobs):
    job, worktree = jobs["wait"]
    started = time.monotonic()
    done = _launcher(
        "watch", job, "--cancel-on-failure", "--interval", "1", "--collective-timeout", "150", cwd=worktree, timeout=150
    )
    took = time.monotonic() - started
    assert "cancelled job" in done.stdout and "GPU-minutes saved" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 1
    assert _wait_done(job, 30) == "CANCELLED"
    assert took < 120, f"watch took {took:.0f}s: the ranks' 150 s wait was not cut short"
    report = worktree / "logs" / job / "report.json"
    _wait_file(report, 60)
    assert json.loads(report.read_text())["verdict"]["rank"] == 3


def test_successful_job_gets_no_report(jobs):
    job, worktree = jobs["ok"]
    assert _wait_done(job) == "COMPLETED"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and f"job {job}: state=" not in (
        HOOK_LOG.read_text() if HOOK_LOG.exists() else ""
    ):
        time.sleep(0.5)
    assert not (worktree / "logs" / job / "report.json").exists()
    assert (worktree / "logs" / job / "manifest.json").exists()
