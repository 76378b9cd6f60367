"""The analyzer against every real sample in sample_logs/: category, global root rank, root-cause line.

Each sample is copied to a neutral folder name without its expected.toml first, so neither the folder
name nor the answer can leak into the verdict. Known gaps are xfail(strict=True) with the reason, so a
fix turns them into failures until the marker is removed.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from diagnose.api import analyze
from diagnose.render.json_report import to_dict

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
CASES = sorted(p.parent for p in SAMPLES.glob("*/expected.toml"))

# Samples the engine does not get right yet, with why. Remove an entry once it passes (strict xfail).
KNOWN_GAPS: dict[str, str] = {}


def _normalise(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def same_root_line(got: str | None, expected: str) -> bool:
    """Equal once whitespace is normalised; a prefix left on (or stripped off) one side is tolerated."""
    got_n, exp_n = _normalise(got), _normalise(expected)
    return bool(got_n) and (got_n == exp_n or got_n.endswith(exp_n) or exp_n.endswith(got_n))


def _copy_without_answer(case: Path, tmp_path: Path) -> Path:
    target = tmp_path / "case"
    shutil.copytree(case, target, ignore=shutil.ignore_patterns("expected.toml"))
    return target


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[case.name])] if case.name in KNOWN_GAPS else []
        yield pytest.param(case, id=case.name, marks=marks)


def test_corpus_meets_the_bar():
    expected = [tomllib.loads((c / "expected.toml").read_text())["expected"] for c in CASES]
    categories = {e["category"] for e in expected}
    off_zero = [e for e in expected if e.get("rank") not in (None, 0)]
    assert len(CASES) >= 24, len(CASES)
    assert len(categories) >= 9, categories
    assert len(off_zero) >= 10, len(off_zero)
    size = sum(f.stat().st_size for f in SAMPLES.rglob("*") if f.is_file())
    assert size < 20 * 2**20, f"sample_logs is {size / 2**20:.1f} MiB"


@pytest.mark.parametrize("case", list(_params()))
def test_sample(case: Path, tmp_path: Path):
    expected = tomllib.loads((case / "expected.toml").read_text())["expected"]
    neutral = _copy_without_answer(case, tmp_path)
    verdict = to_dict(analyze([str(neutral)]))["verdict"]
    got = (verdict["category"], verdict["rank"])
    assert got == (expected["category"], expected.get("rank")), verdict["title"]
    if "subcategory" in expected:
        assert verdict["subcategory"] == expected["subcategory"]
    if "exception" in expected:
        assert same_root_line(verdict["exception"], expected["exception"]), verdict["exception"]
