"""Every shipped pattern loads, compiles in both engines, and passes its own examples."""

from __future__ import annotations

import pytest

from diagnose.checker import check_example, rust_compatible
from diagnose.model import CATEGORIES
from diagnose.patterns import PatternError, builtin_dir, load_patterns, parse_pattern
from diagnose.scan import Scanner

PATTERNS = load_patterns([builtin_dir()])
SCANNER = Scanner(PATTERNS)
CASES = [(p, e) for p in PATTERNS for e in p.examples]


def test_library_is_large_enough_and_covers_every_category():
    categories = {p.category for p in PATTERNS}
    assert len(PATTERNS) >= 60, f"only {len(PATTERNS)} patterns"
    # every category a failure can have (not the verdict-only "unknown" and "ok")
    assert categories >= set(CATEGORIES) - {"unknown", "ok"}


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_pattern_has_a_must_match_example_and_compiles_in_rust(pattern):
    assert any(e.should_match for e in pattern.examples)
    assert rust_compatible(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "example"), CASES, ids=[f"{p.id}:{i}" for p in PATTERNS for i, _ in enumerate(p.examples)]
)
def test_example(pattern, example):
    assert check_example(SCANNER, pattern, example) is None


def test_bad_pattern_is_named_with_its_problem(tmp_path):
    with pytest.raises(PatternError, match="look-around"):
        parse_pattern({"id": "x", "title": "t", "category": "oom", "role": "root", "regex": "a(?=b)"}, "x.toml")
    with pytest.raises(PatternError, match="category"):
        parse_pattern({"id": "x", "title": "t", "category": "nope", "role": "root", "regex": "a"}, "x.toml")
