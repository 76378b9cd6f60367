"""Run every pattern's own examples through the production matcher.

Used by `diagnose patterns check DIR` and by tests/test_patterns.py, so a user's pattern directory is
held to exactly the bar the shipped library is.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from diagnose.patterns import Example, Pattern
from diagnose.scan import Scanner


@dataclass(frozen=True)
class ExampleFailure:
    pattern: str
    path: str
    example: str
    problem: str


def check_example(scanner: Scanner, pattern: Pattern, example: Example) -> str | None:
    """Why the example fails, or None. Matching goes through Scanner.match_line like production."""
    hit = scanner.match_line(example.text)
    matched = dict(hit.fields).get(pattern.id) if hit is not None else None
    if not example.should_match:
        return "matched but must not" if matched is not None else None
    if matched is None:
        return "did not match"
    wrong = {k: (v, matched.get(k)) for k, v in example.expect.items() if matched.get(k) != v}
    if wrong:
        return "; ".join(f"{k}: expected {want!r}, got {got!r}" for k, (want, got) in wrong.items())
    return None


def rust_compatible(pattern: Pattern) -> str | None:
    """polars' Rust engine must accept the regex too (design contract); None when it does."""
    try:
        pl.Series([""]).str.contains(pattern.regex)
    except Exception as exc:  # polars raises ComputeError subclasses that vary by version
        return f"polars (Rust regex) rejects the regex: {exc}"
    return None


def check_patterns(patterns: list[Pattern]) -> list[ExampleFailure]:
    scanner = Scanner(patterns)
    failures = []
    for pattern in patterns:
        if (problem := rust_compatible(pattern)) is not None:
            failures.append(ExampleFailure(pattern.id, pattern.path, "", problem))
        if not any(e.should_match for e in pattern.examples):
            failures.append(ExampleFailure(pattern.id, pattern.path, "", "needs at least one must_match example"))
        for example in pattern.examples:
            if (problem := check_example(scanner, pattern, example)) is not None:
                failures.append(ExampleFailure(pattern.id, pattern.path, example.text, problem))
    return failures
