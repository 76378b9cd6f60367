"""analyze(paths) -> Diagnosis: the one library entry point; the CLI and the SLURM hook call only this.

Stages: discover files -> ingest (scan, tracebacks, summaries) -> resolve ranks -> candidates and
incidents -> root cause or hang analysis -> advice. Each stage lives in its own module.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from diagnose import __version__
from diagnose.advise import advise, announced_world_size, early_exit_fixes, run_config
from diagnose.decide import (
    build_candidates,
    choose_root,
    exit_rows,
    group_incidents,
)
from diagnose.discover import LogFile, discover
from diagnose.hang import analyze_hang, ranks_that_left
from diagnose.ingest import ingest
from diagnose.jobstate import with_job_state
from diagnose.model import Diagnosis, Inputs, JobInfo, RankSummary
from diagnose.patterns import Pattern, load_patterns, pattern_dirs
from diagnose.ranks import census_ranks, resolve_ranks, srun_reported_ranks
from diagnose.scan import Scanner
from diagnose.slurm import job_info, saved_job_info
from diagnose.summarize import build_evidence, build_symptoms, build_verdict, related_incidents

_SLURM_OUTPUT = re.compile(r"slurm-\d+(?:_\d+)?\.(?:out|err)$")


class NoLogsError(ValueError):
    """Nothing to analyse under the given paths (bad usage, exit code 2)."""


@dataclass(frozen=True)
class Library:
    patterns: list[Pattern]
    scanner: Scanner


def load_library(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> Library:
    """Patterns from the built-in, DIAGNOSE_PATTERNS and extra directories, compiled once per process."""
    return _compiled(tuple(str(d) for d in pattern_dirs(extra_dirs)))


@functools.lru_cache(maxsize=8)
def _compiled(dirs: tuple[str, ...]) -> Library:
    patterns = load_patterns([Path(d) for d in dirs])
    return Library(patterns, Scanner(patterns))


def analyze(
    paths: list[str],
    *,
    job: str | None = None,
    patterns: Iterable[str | os.PathLike[str]] = (),
    stdin: bytes | None = None,
    library: Library | None = None,
) -> Diagnosis:
    library = library or load_library(patterns)
    if stdin is not None:
        found_files: tuple[LogFile, ...] = (LogFile(Path("-"), "log"),)
        warnings: tuple[str, ...] = ()
        paths = ["-"]
    else:
        found = discover(paths, job)
        found_files, warnings = found.files, found.warnings
    if not found_files:
        raise NoLogsError(
            "; ".join(warnings) or f"no log files found under {', '.join(paths)}" + (f" for job {job}" if job else "")
        )
    ingested = ingest(list(found_files), paths, library.scanner, stdin=stdin)
    run_dirs = frozenset(f.run_dir for f in found_files if f.run_dir is not None)
    events, rank_map = resolve_ranks(ingested.events, ingested.census, run_dirs)
    by_id = {p.id: p for p in library.patterns}
    candidates = build_candidates(events, by_id)
    incidents = group_incidents(candidates)
    root = choose_root(incidents)
    seen = set(events.get_column("grank").drop_nulls().to_list()) | census_ranks(ingested.census, rank_map)
    config = run_config(candidates)
    # Global ranks are 0..WORLD_SIZE-1: the world size a process printed, else up to the highest rank seen (a
    # printed size also shows ranks above every one that wrote a line, which went silent).
    printed_world = announced_world_size(candidates, config)
    expected = set(range(max(max(seen) + 1 if seen else 0, printed_world)))
    launcher_failed = {r["grank"] for r in exit_rows(events) if r["grank"] is not None}
    launcher_failed |= srun_reported_ranks(events, rank_map)
    hang = analyze_hang(candidates, expected, seen, launcher_failed or None) if root is None else None
    left = (
        ranks_that_left(candidates, seen, launcher_failed or None, printed_world)
        if root is None and hang is None
        else set()
    )
    excerpt = job is None and _is_excerpt(found_files)
    verdict = build_verdict(root, hang, candidates, events, left, excerpt=excerpt, expected=expected)
    if root is not None and verdict.rank is None and printed_world == 1:
        verdict = replace(verdict, rank=0, ranks=(0,))  # a job of one process: whatever failed, failed on rank 0
    world = printed_world or len(expected) or None
    details, fixes = advise(root, hang, related_incidents(root, incidents) if root else [], world)
    if verdict.subcategory == "early_exit" and not fixes:
        fixes = early_exit_fixes()
    if config:
        details = {**details, "config": config}
    inputs = Inputs(tuple(paths), ingested.files, ingested.bytes, _summarise_warnings(warnings + ingested.warnings))
    job_facts = job_info(job) if job else JobInfo()
    if job_facts.state is None:  # no sacct here (logs copied off the cluster): a record saved with the logs
        job_facts = saved_job_info((f.path for f in found_files), job) or job_facts
    verdict, state_fixes = with_job_state(verdict, job_facts)
    if state_fixes:
        fixes = [*state_fixes, *fixes]
    failed = sorted({c.rank for c in candidates if c.role == "root" and c.rank is not None})
    victims = sorted({c.rank for c in candidates if c.role == "symptom" and c.rank is not None} - set(verdict.ranks))
    silent = sorted(expected - seen)
    return Diagnosis(
        inputs=inputs,
        verdict=verdict,
        job=job_facts,
        evidence=tuple(build_evidence(root, hang, candidates)),
        symptoms=tuple(build_symptoms(candidates, root)),
        details=details,
        fixes=tuple(fixes),
        ranks=RankSummary(
            expected=max(expected) + 1 if expected else None,
            seen=tuple(sorted(seen)),
            failed=tuple(failed),
            victims=tuple(victims),
            silent=tuple(silent),
        ),
    )


def _is_excerpt(files: tuple[LogFile, ...]) -> bool:
    """A single log that is not one of a job's own files (a torchrun per-rank log, SLURM's slurm-N.out, the
    files of --job): a paste, stdin, or an excerpt saved from an issue or a chat."""
    if len(files) != 1:
        return False
    only = files[0]
    if str(only.path) == "-":
        return True
    return only.run_dir is None and not _SLURM_OUTPUT.match(only.path.name) and not _starts_a_job(only.path)


# What a launcher prints when it starts the workers: a file that begins with it is a job's whole console
# (`torchrun ... 2>&1 | tee train.log`), not an excerpt cut from the middle of one.
_JOB_START = (b"Setting OMP_NUM_THREADS environment variable for each process", b"WORLD INFO DICT")
_JOB_START_BYTES = 4096


def _starts_a_job(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            head = handle.read(_JOB_START_BYTES)
    except OSError:
        return False
    return any(marker in head for marker in _JOB_START)


def _summarise_warnings(warnings: tuple[str, ...]) -> tuple[str, ...]:
    """Empty per-rank files are normal (a rank that printed nothing): one line for all of them."""
    empty = [w.removesuffix(": empty file") for w in warnings if w.endswith(": empty file")]
    rest = tuple(w for w in warnings if not w.endswith(": empty file"))
    if not empty:
        return rest
    shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
    return (*rest, f"{len(empty)} empty file{'s' if len(empty) > 1 else ''} (ranks that printed nothing): {shown}")


__all__ = ["Diagnosis", "NoLogsError", "analyze", "load_library", "__version__"]
