"""The same real failure laid out the ways real clusters store it: one file, per-task files, only the
torchrun tree, glued lines, unprefixed paste, several jobs side by side.

Every layout is made by rearranging the lines of one real SLURM run (sample_logs/slurm-shape-second-node:
two nodes x four ranks, global rank 6 = node 1 local rank 2 raises, the others are victims); no line is
invented.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from diagnose.api import analyze
from diagnose.prefixes import strip_prefix

ROOT_SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
SAMPLE = ROOT_SAMPLES / "slurm-shape-second-node"
ROOT_LINE = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x20 and 16x32)"
LABEL = re.compile(r"^\s*(\d+): ")


def _err_lines() -> list[str]:
    return next(SAMPLE.glob("slurm-*.err")).read_text().splitlines()


def _verdict(path: Path):
    return analyze([str(path)]).verdict


def test_per_task_files_without_labels(tmp_path):
    """`srun --output=%j-%t.err` without --label: one file per node, identity only in the file name."""
    per_task: dict[str, list[str]] = {}
    for line in _err_lines():
        found = LABEL.match(line)
        task = found.group(1) if found else "0"
        per_task.setdefault(task, []).append(LABEL.sub("", line, count=1))
    for task, lines in per_task.items():
        (tmp_path / f"4-{task}.err").write_text("\n".join(lines) + "\n")
    verdict = _verdict(tmp_path)
    assert (verdict.category, verdict.rank, verdict.exception) == ("shape", 6, ROOT_LINE)


def test_torchrun_tree_alone(tmp_path):
    shutil.copytree(SAMPLE / "torchrun-logs", tmp_path / "torchrun-logs")
    verdict = _verdict(tmp_path)
    assert (verdict.category, verdict.rank, verdict.exception) == ("shape", 6, ROOT_LINE)


def test_glued_lines_from_unbuffered_writers(tmp_path):
    lines = _err_lines()
    header = next(i for i, line in enumerate(lines) if "[rank6]: Traceback" in line)
    glued = lines[: header - 1] + [lines[header - 1] + LABEL.sub("", lines[header], count=1)] + lines[header + 1 :]
    (tmp_path / "slurm-4.err").write_text("\n".join(glued) + "\n")
    verdict = _verdict(tmp_path)
    assert (verdict.rank, verdict.exception) == (6, ROOT_LINE)
    assert verdict.location is not None and verdict.location.file.endswith("train.py")


def test_unprefixed_paste_still_finds_the_error(tmp_path):
    """A user pasted the console with every prefix stripped: the rank is gone, the cause is not."""
    (tmp_path / "pasted.log").write_text("\n".join(strip_prefix(line) for line in _err_lines()) + "\n")
    verdict = _verdict(tmp_path)
    assert (verdict.category, verdict.exception) == ("shape", ROOT_LINE)
    assert verdict.rank in (None, 6)


def test_job_option_picks_that_jobs_files(tmp_path):
    other = Path(__file__).resolve().parent.parent / "sample_logs" / "slurm-sigkill-rank"
    shutil.copy(next(SAMPLE.glob("slurm-*.err")), tmp_path / "train-12345.err")
    shutil.copy(next(other.glob("slurm-*.err")), tmp_path / "train-12346.err")
    assert _verdict_for_job(tmp_path, "12345").category == "shape"
    assert _verdict_for_job(tmp_path, "12346").category == "killed"


def _verdict_for_job(path: Path, job: str):
    return analyze([str(path)], job=job).verdict


def test_job_folder_named_by_id(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "logs" / "12345", ignore=shutil.ignore_patterns("expected.toml"))
    assert _verdict_for_job(tmp_path / "logs", "12345").rank == 6


def test_summary_alone_still_carries_the_error(tmp_path):
    """Only torchrun's ChildFailedError block was pasted: the traceback embedded in its Root Cause entry
    (copied from error.json) still names the rank and the error."""
    lines = (SAMPLE.parent / "gpu-shape-exit" / "launcher.err").read_text().splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("torch.distributed.elastic.multiprocessing.errors")
    )
    (tmp_path / "pasted.log").write_text("\n".join(lines[start:]) + "\n")
    verdict = _verdict(tmp_path)
    assert (verdict.category, verdict.rank) == ("shape", 1)
    assert verdict.exception == "RuntimeError: shape '[4, 1024]' is invalid for input of size 3096"


# Runs with --tee, whose console repeats the workers' lines (the quiet layout's console holds only the agent's).
GPU_RUNS = sorted(
    p.parent
    for p in SAMPLE.parent.glob("gpu-*/expected.toml")
    if any((p.parent / "torchrun-logs").rglob("*.log"))
    and not p.parent.name.startswith(("gpu-quiet-", "gpu-rerun-quiet-"))
)
# Facts only the launcher prints: a worker killed by a signal with no line of its own, torchrun's own SIGTERM.
LAUNCHER_ONLY = {"gpu-sigkill", "gpu-external-sigterm", "gpu-keyboard-interrupt"}


def _copy_part(run: Path, dest: Path, tree: bool) -> Path:
    """The launcher's console files alone, or the torchrun --log-dir tree alone, as a user might point at."""
    for f in run.rglob("*"):
        if f.is_file() and f.name != "expected.toml" and ("torchrun-logs" in f.parts) == tree:
            target = dest / f.relative_to(run)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    return dest


@pytest.mark.parametrize("tree", [False, True], ids=["console-only", "tree-only"])
@pytest.mark.parametrize("run", GPU_RUNS, ids=lambda p: p.name)
def test_gpu_run_read_from_either_half_of_its_files(run, tree, tmp_path):
    """The console (`--tee`) and the per-rank tree hold the same failure: either alone gives the same answer."""
    if tree and run.name.replace("rerun-tree-", "") in LAUNCHER_ONLY:  # a second run of the scenario too
        pytest.skip("the signal death is only in the launcher's output")
    expected = tomllib.loads((run / "expected.toml").read_text())["expected"]
    verdict = _verdict(_copy_part(run, tmp_path / "job", tree))
    assert (verdict.category, verdict.rank) == (expected["category"], expected.get("rank"))
    if "exception" in expected:
        assert (verdict.exception or "").strip() == expected["exception"].strip()


def test_interrupted_workers_alone_read_as_an_interrupt(tmp_path):
    """Without the launcher's console (which says the agent got SIGINT), the workers' own files show only
    KeyboardInterrupt tracebacks: the job was interrupted, no rank failed."""
    verdict = _verdict(_copy_part(SAMPLE.parent / "gpu-keyboard-interrupt", tmp_path / "job", True))
    assert (verdict.category, verdict.subcategory, verdict.rank) == ("killed", "sigint", None)
    assert verdict.exception == "KeyboardInterrupt"


def test_printed_world_size_shows_a_silent_top_rank(tmp_path):
    """The job's stdout with rank 7's start-up line removed (a rank that printed nothing): only Megatron's
    printed `world_size ... 8` says ranks went up to 7, so rank 7 is listed as silent, not forgotten."""
    job = tmp_path / "job"
    job.mkdir()
    lines = (SAMPLE / "slurm-4.out").read_text().splitlines(keepends=True)
    (job / "slurm-4.out").write_text("".join(line for line in lines if not line.startswith("1: [default3]")))
    ranks = analyze([str(job)]).ranks
    assert (ranks.expected, ranks.seen, ranks.silent) == (8, (0, 1, 2, 3, 4, 5, 6), (7,))


def _rank_files(tmp_path: Path, name_of) -> Path:
    """gpu-oom-forward's per-rank files (one node: local rank = global rank), stdout then stderr, saved under
    the names a training script's own per-rank logging would give them, without the `[rankN]:` prefix torch puts
    on an uncaught traceback (a script's logger.exception writes none): the name is all that says the rank."""
    tree = next((ROOT_SAMPLES / "gpu-oom-forward" / "torchrun-logs").glob("*/attempt_0"))
    out = tmp_path / "logs"
    for rank_dir in sorted(tree.iterdir()):
        target = out / name_of(int(rank_dir.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        text = (rank_dir / "stdout.log").read_text() + (rank_dir / "stderr.log").read_text()
        target.write_text(re.sub(r"(?m)^\[rank\d+\]:", "", text))
    return out


@pytest.mark.parametrize(
    "name_of", [lambda r: f"rank_{r}.log", lambda r: f"train-rank{r}.txt", lambda r: f"rank{r}/out.log"]
)
def test_files_named_after_their_rank(tmp_path, name_of):
    diagnosis = analyze([str(_rank_files(tmp_path, name_of))])
    assert (diagnosis.verdict.category, diagnosis.verdict.rank) == ("oom", 1)
    assert diagnosis.ranks.seen == (0, 1)


def test_a_folder_that_only_mentions_a_rank_names_none(tmp_path):
    logs = _rank_files(tmp_path, lambda r: f"oom-on-rank1-node{r}/out.log")
    assert analyze([str(logs)]).verdict.rank is None


RANK_FILE_RUNS = sorted(p.name for p in ROOT_SAMPLES.glob("gpu-rank-files-*"))


@pytest.mark.parametrize("run", RANK_FILE_RUNS)
def test_a_scripts_own_rank_files_alone_name_the_failing_rank(run):
    """The per-rank files a script keeps itself (device run 32) carry no rank in their lines; their names do. A
    failure raised in Python is found in them alone, on the same rank as in the whole run. (Hangs and kills
    are not: the watchdog's C++ lines and the launcher's report only reach the console.)"""
    expected = tomllib.loads((ROOT_SAMPLES / run / "expected.toml").read_text())["expected"]
    if expected["category"] in ("hang", "killed"):
        pytest.skip("the evidence of a hang or a kill is only in the console")
    verdict = analyze([str(ROOT_SAMPLES / run / "logs")]).verdict
    assert (verdict.category, verdict.rank) == (expected["category"], expected.get("rank"))


def test_two_nodes_known_only_by_their_run_dirs_give_no_global_rank(tmp_path):
    """Two torchrun --log-dir trees (two nodes) whose lines carry no rank: the failing file's local rank and node
    are known, its global rank is not, and the report says so instead of taking the local rank for it."""
    tree = next((ROOT_SAMPLES / "gpu-oom-forward" / "torchrun-logs").glob("*/attempt_0"))
    for node in ("node0", "node1"):
        for rank_dir in tree.iterdir():
            target = tmp_path / node / "run" / "attempt_0" / rank_dir.name
            target.mkdir(parents=True)
            for stream in ("stdout.log", "stderr.log"):
                text = (rank_dir / stream).read_text()
                if node == "node0" and "OutOfMemoryError" in text:
                    text = ""  # only node 1's local rank 1 ran out of memory
                (target / stream).write_text(re.sub(r"(?m)^\[rank\d+\]:", "", text))
    verdict = analyze([str(tmp_path)]).verdict
    assert (verdict.category, verdict.rank) == ("oom", None)
    assert "local rank 1 of" in verdict.title and "node1" in verdict.title
