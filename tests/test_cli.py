"""The `diagnose` command as users and hooks call it: output streams, exit codes, options."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
SHAPE = SAMPLES / "slurm-shape-second-node"


def run(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "diagnose.cli", *args], input=stdin, capture_output=True, timeout=120, env=env
    )


# No sacct on PATH: `--job N` then only finds files, whatever job N was on the local cluster the tests started.
WITHOUT_SACCT = {**os.environ, "PATH": str(Path(sys.executable).parent)}


def test_json_is_alone_on_stdout_and_warnings_go_to_stderr():
    done = run(str(SAMPLES / "slurm-hang-stalled-rank"), "--format", "json")
    assert done.returncode == 0
    report = json.loads(done.stdout)  # nothing but the report on stdout
    assert report["schema_version"] == 1 and report["verdict"]["category"] == "hang"
    assert b"empty file" in done.stderr


def test_terminal_report_leads_with_the_verdict():
    done = run(str(SHAPE))
    assert done.returncode == 0
    head = done.stdout.decode()[:400]
    assert "rank 6" in head and "Tensor shapes" in head


def test_markdown_report_has_summary_then_details():
    text = run(str(SHAPE), "--format", "markdown").stdout.decode()
    assert text.startswith("**") and "<details>" in text
    assert text.index("mat1 and mat2") < text.index("<details>")


def test_stdin_paste(tmp_path):
    pasted = next(SHAPE.glob("slurm-*.err")).read_bytes()
    report = json.loads(run("-", "--format", "json", stdin=pasted).stdout)
    assert (report["verdict"]["category"], report["verdict"]["rank"]) == ("shape", 6)


def test_output_file_is_written_whole(tmp_path):
    target = tmp_path / "out" / "report.json"
    done = run(str(SHAPE), "--format", "json", "--output", str(target))
    assert done.returncode == 0 and done.stdout == b""
    assert json.loads(target.read_text())["verdict"]["rank"] == 6
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_no_logs_is_exit_2_with_one_line(tmp_path):
    done = run(str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.decode().startswith("diagnose: ") and b"Traceback" not in done.stderr


def test_job_without_files_is_exit_2(tmp_path):
    shutil.copy(next(SHAPE.glob("slurm-*.err")), tmp_path / "slurm-4.err")
    done = run(str(tmp_path), "--job", "999")
    assert done.returncode == 2 and b"999" in done.stderr


def test_bad_format_is_exit_2():
    assert run(str(SHAPE), "--format", "yaml").returncode == 2


def test_user_pattern_directory_overrides_and_extends(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "site-shape.toml").write_text(
        'id = "site-shape"\ntitle = "Our model code got a bad batch"\ncategory = "data"\nrole = "root"\n'
        "priority = 95\nregex = '''mat1 and mat2 shapes cannot be multiplied'''\n"
        '[[examples]]\nmust_match = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x20 and 16x32)"\n'
    )
    report = json.loads(run(str(SHAPE), "--format", "json", "--patterns", str(tmp_path / "mine")).stdout)
    assert (report["verdict"]["pattern"], report["verdict"]["category"]) == ("site-shape", "data")


def test_patterns_check_names_the_broken_file(tmp_path):
    (tmp_path / "bad.toml").write_text('id = "bad"\ntitle = "x"\ncategory = "oom"\nrole = "root"\nregex = "a(?=b)"\n')
    done = run("patterns", "check", str(tmp_path))
    assert done.returncode == 1 and b"bad.toml" in done.stderr + done.stdout


def test_patterns_check_passes_on_the_shipped_library():
    done = run("patterns", "check", str(Path(__file__).resolve().parent.parent / "patterns"))
    assert done.returncode == 0, done.stdout.decode()[-2000:]


def test_explain_and_list():
    assert b"CUDA out of memory" in run("explain", "cuda-oom").stdout
    assert run("explain", "no-such-pattern").returncode == 2
    listing = run("patterns", "list").stdout.decode().splitlines()
    assert len(listing) >= 60 and any(line.startswith("cuda-oom ") for line in listing)


def test_healthy_job_file_is_ok_but_a_quiet_excerpt_is_unknown(tmp_path):
    """A job's own output that shows no failure is `ok`; the same lines pasted as an excerpt say only that
    the error is not in them, so the report must not claim the job was fine."""
    healthy = (SAMPLES / "slurm-ok" / "slurm-2.out").read_bytes()
    job = tmp_path / "job"
    job.mkdir()
    (job / "slurm-2.out").write_bytes(healthy)
    excerpt = tmp_path / "pasted.log"
    excerpt.write_bytes(b"\n".join(healthy.splitlines()[:20]) + b"\n")
    named = tmp_path / "named"
    named.mkdir()
    (named / "train-2.out").write_bytes(healthy)  # sbatch --output=%x-%j.out
    as_job = json.loads(run(str(job), "--format", "json").stdout)["verdict"]
    by_job_id = json.loads(run(str(named), "--job", "2", "--format", "json", env=WITHOUT_SACCT).stdout)["verdict"]
    as_excerpt = json.loads(run(str(excerpt), "--format", "json").stdout)["verdict"]
    assert as_job["category"] == "ok" and by_job_id["category"] == "ok"
    assert as_excerpt["category"] == "unknown" and as_excerpt["confidence"] == "low"
