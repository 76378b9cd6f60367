"""Renderers: goldens from real samples pin the layout; property tests pin that hostile text stays inert.

The engine is still changing, so goldens are cheap to refresh: `UPDATE_GOLDENS=1 pytest tests/test_render.py`
rewrites every file under tests/goldens/, then review the diff.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from diagnose.api import analyze
from diagnose.model import Diagnosis, Evidence, Fix, Inputs, JobInfo, Location, RankSummary, Symptom, Verdict
from diagnose.rankset import format_ranks, parse_ranks
from diagnose.render.markdown import render_markdown
from diagnose.render.terminal import render_terminal

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = Path(__file__).resolve().parent / "goldens"
UPDATE = os.environ.get("UPDATE_GOLDENS") == "1"

SAMPLES = {
    "slurm-shape-second-node": "root cause on one rank, victims on the others",
    "slurm-megatron-tp-heads": "same root on every rank, parallelism arithmetic",
    "public-oom-rank11-multinode-sigterm": "OOM numbers",
    "slurm-hang-stalled-rank": "hang with a suspect and the per-rank table",
    "slurm-ok": "nothing failed",
    "public-import-apex-dist-launch": "no rank known, fixes with commands",
    "gpu-duplicate-gpu": "a generic NCCL error and the specific line printed with it",
}


@functools.cache
def _diagnose(sample: str) -> Diagnosis:
    with contextlib.chdir(ROOT):  # paths in the report stay relative, so goldens do not depend on the checkout
        return analyze([f"sample_logs/{sample}"])


def _check_golden(name: str, text: str) -> None:
    golden = GOLDENS / name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return
    assert golden.exists(), f"missing {golden}; run UPDATE_GOLDENS=1 pytest tests/test_render.py"
    assert text == golden.read_text(encoding="utf-8"), f"{name} changed; if intended, rerun with UPDATE_GOLDENS=1"


@pytest.mark.parametrize("sample", SAMPLES)
def test_terminal_report_matches_golden(sample: str) -> None:
    text = render_terminal(_diagnose(sample), width=100, color=False, capture=True)
    assert text is not None
    _check_golden(f"{sample}.txt", text)


@pytest.mark.parametrize("sample", SAMPLES)
def test_markdown_report_matches_golden(sample: str) -> None:
    _check_golden(f"{sample}.md", render_markdown(_diagnose(sample)))


@pytest.mark.parametrize("width", [60, 80, 100])
def test_terminal_lines_never_exceed_width(width: int) -> None:
    text = render_terminal(_diagnose("public-oom-rank11-multinode-sigterm"), width=width, color=False, capture=True)
    assert text is not None
    assert max(len(line) for line in text.splitlines()) <= width


def test_terminal_without_color_has_no_escape_codes() -> None:
    text = render_terminal(_diagnose("slurm-shape-second-node"), width=80, color=False, capture=True)
    assert text is not None and "\x1b" not in text


# --- hostile input ---------------------------------------------------------------------------------

HOSTILE = [
    "[bold]not bold[/bold]",
    "[/]",
    ":warning: :smile:",
    "```",
    "````\n```\n",
    "</details><details><summary>pwned</summary>",
    "<script>alert(1)</script>",
    "| a | b |\n|---|---|",
    "*_~#![x](http://e)",
    "line one\nline two\r\nline three\rfour",
    "\x1b[31mred\x1b[0m\x07\x00",
    "\u202eevil",
    "日本語のエラー 🏖️ Ωmega",
    "x" * 5000,
    "word " * 400,
    "",
    " ",
    "\\",
]
text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=300))
maybe_text = st.one_of(st.none(), text)
ranks = st.lists(st.integers(min_value=0, max_value=4096), max_size=40).map(tuple)
json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)
hang_row = st.dictionaries(st.sampled_from(["rank", "seq", "op", "enqueued", "completed", "note", "x"]), json_value)
details = st.one_of(
    st.dictionaries(text, json_value, max_size=3),
    st.fixed_dictionaries(
        {},
        optional={
            "oom": st.dictionaries(st.sampled_from(["requested", "free", "total", "gpu", "short_by_gib"]), json_value),
            "parallelism": st.dictionaries(
                st.sampled_from(["num_attention_heads", "tensor_model_parallel_size", "world_size", "tp", "pp", "cp"]),
                st.one_of(st.integers(min_value=-3, max_value=64), json_value),
            ),
            "hang": st.one_of(
                json_value,
                st.fixed_dictionaries(
                    {"suspects": st.one_of(ranks.map(list), json_value), "table": st.lists(hang_row)}
                ),
            ),
        },
    ),
)
diagnoses = st.builds(
    Diagnosis,
    inputs=st.builds(
        Inputs,
        st.lists(text, max_size=3).map(tuple),
        st.integers(0, 10**6),
        st.integers(0, 10**12),
        st.lists(text).map(tuple),
    ),
    verdict=st.builds(
        Verdict,
        category=st.one_of(st.sampled_from(["oom", "hang", "ok", "unknown"]), text),
        title=text,
        subcategory=maybe_text,
        rank=st.one_of(st.none(), st.integers(0, 4096)),
        ranks=ranks,
        host=maybe_text,
        exception=maybe_text,
        location=st.one_of(st.none(), st.builds(Location, text, st.integers())),
        time=maybe_text,
        confidence=st.one_of(st.sampled_from(["high", "medium", "low"]), text),
        pattern=maybe_text,
        explanation=text,
    ),
    job=st.builds(JobInfo, maybe_text, maybe_text, maybe_text, st.lists(text, max_size=3).map(tuple), maybe_text),
    evidence=st.lists(
        st.builds(Evidence, text, st.integers(), st.one_of(st.none(), st.integers(0, 4096)), text), max_size=6
    ).map(tuple),
    symptoms=st.lists(st.builds(Symptom, text, ranks, st.integers(0, 10**6), text), max_size=4).map(tuple),
    details=details,
    fixes=st.lists(st.builds(Fix, text, text, maybe_text), max_size=4).map(tuple),
    ranks=st.builds(RankSummary, st.one_of(st.none(), st.integers(0, 4096)), ranks, ranks, ranks, ranks),
)
hostile_settings = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@hostile_settings
@given(diagnoses, st.sampled_from([40, 80, 100]))
def test_terminal_never_crashes_and_keeps_its_width(diagnosis: Diagnosis, width: int) -> None:
    text = render_terminal(diagnosis, width=width, color=False, capture=True)
    assert text is not None
    assert "\x1b" not in text  # neither our colours nor the log's own escape codes reach the terminal
    assert max(cell_len(line) for line in text.splitlines()) <= width  # cells, not code points: 日 is two


@hostile_settings
@given(diagnoses)
def test_markdown_never_crashes_and_details_stay_balanced(diagnosis: Diagnosis) -> None:
    lines = render_markdown(diagnosis).splitlines()
    opened = sum(line.startswith("<details>") for line in lines)
    assert opened == sum(line == "</details>" for line in lines)


def _with_log_line(line: str) -> Diagnosis:
    return Diagnosis(
        inputs=Inputs(("job/",), 1, 10),
        verdict=Verdict(category="code", title=line, exception=line),
        evidence=(Evidence("rank0.log", 7, 0, line),),
        symptoms=(Symptom("x", (1,), 1, line),),
    )


@pytest.mark.parametrize("line", ["[bold red]boom[/bold red]", "[link=http://e]x[/link] :warning:"])
def test_terminal_shows_rich_markup_in_logs_literally(line: str) -> None:
    text = render_terminal(_with_log_line(line), width=100, color=True, capture=True)
    assert text is not None and line in text


def test_markdown_fence_outgrows_backticks_in_the_log() -> None:
    report = render_markdown(_with_log_line("look: ```` and ``` inside"))
    assert "`````\nlook: ```` and ``` inside\n`````" in report


def test_markdown_escapes_title_but_not_fenced_log_text() -> None:
    report = render_markdown(_with_log_line("</details> *x*"))
    headline = report.splitlines()[0]
    assert "&lt;/details&gt; \\*x\\*" in headline
    assert "\n</details> *x*\n" in report  # verbatim, but only inside a fence


@given(st.lists(text, min_size=1, max_size=3))
@settings(deadline=None)
def test_empty_diagnosis_fields_render(paths: list[str]) -> None:
    diagnosis = Diagnosis(inputs=Inputs(tuple(paths), 0, 0), verdict=Verdict(category="unknown", title=""))
    assert render_markdown(diagnosis)
    assert render_terminal(diagnosis, width=80, color=False, capture=True)


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=64))
def test_rank_ranges_read_back_as_written(ranks: set[int]) -> None:
    """`0-3,7` as reports print it and as srun prints task lists reads back to the same ranks."""
    assert parse_ranks(format_ranks(ranks)) == ranks


def test_rank_lists_as_launchers_print_them() -> None:
    # srun's `tasks 0-1,3-7: Terminated` (sample_logs/slurm-srun-per-rank-sigkill) and torchelastic's
    # `global_ranks=[0, 1]`; pieces that are not ranks are skipped
    assert parse_ranks("0-1,3-7") == {0, 1, 3, 4, 5, 6, 7}
    assert parse_ranks("0, 1") == {0, 1}
    assert parse_ranks("-1,x,2") == {2}
