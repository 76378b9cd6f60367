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


def test_a_pattern_file_changed_after_a_run_is_validated_again(tmp_path, monkeypatch):
    """The library's regexes compile on first use once an earlier run validated exactly these files; an edit
    (here a user's typo) must still be reported with its file at load, not deep in a scan."""
    monkeypatch.setenv("DIAGNOSE_CACHE", str(tmp_path / "cache"))
    user = tmp_path / "mine" / "oom"
    user.mkdir(parents=True)
    pattern_file = user / "host-oom-note.toml"
    body = 'id = "host-oom-note"\ntitle = "t"\ncategory = "oom"\nrole = "root"\nregex = \'\'\'{}\'\'\'\n'
    pattern_file.write_text(body.format("Out of memory: Killed process (?P<pid>\\d+)"))
    first = {p.id: p for p in load_patterns([builtin_dir(), tmp_path / "mine"])}
    again = {p.id: p for p in load_patterns([builtin_dir(), tmp_path / "mine"])}  # validated: compiles lazily
    line = "Out of memory: Killed process 4242 (python) total-vm:1234kB"
    assert first["host-oom-note"].fields(line) == again["host-oom-note"].fields(line) == {"pid": "4242"}
    pattern_file.write_text(body.format("Out of memory: Killed process (?P<pid>\\d+"))
    with pytest.raises(PatternError, match="host-oom-note.toml: regex does not compile"):
        load_patterns([builtin_dir(), tmp_path / "mine"])
