"""The scanner finds the same lines with or without hyperscan, and its relaxed prefilter never loses one."""

from __future__ import annotations

from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose import scan
from diagnose.patterns import GROUP_NAME, builtin_dir, load_patterns
from diagnose.relax import relax

PATTERNS = load_patterns([builtin_dir()])
SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
REAL_LINES = sorted(
    {
        line
        for f in SAMPLES.glob("*/*.*")
        if f.suffix in (".log", ".err", ".out")
        for line in f.read_text(errors="replace").splitlines()
    }
)


def _hits(scanner: scan.Scanner, data: bytes) -> list[tuple[int, tuple[str, ...]]]:
    return [(h.line_no, h.pattern_ids) for h in scanner.scan(data)]


@pytest.mark.skipif(scan.hyperscan is None, reason="hyperscan not installed: only the fallback exists here")
@pytest.mark.parametrize(
    "sample", ["slurm-hang-stalled-rank", "gpu-nccl-ifname-debug", "public-ecc-2gpu-watchdog-rank1"]
)
def test_fallback_finds_what_hyperscan_finds(sample, monkeypatch):
    data = b"".join(
        f.read_bytes() for f in sorted((SAMPLES / sample).rglob("*")) if f.is_file() and f.suffix != ".toml"
    )
    fast = _hits(scan.Scanner(PATTERNS), data)
    monkeypatch.setattr(scan, "hyperscan", None)
    assert _hits(scan.Scanner(PATTERNS), data) == fast and fast


@pytest.mark.skipif(scan.hyperscan is None, reason="hyperscan not installed: only the fallback exists here")
def test_hyperscan_drops_no_line_of_any_public_excerpt(monkeypatch):
    """Hyperscan compiles every signature into one database, and one candidate signature (a `[ N] ` frame
    regex) made it drop another's match on a line (found by the pattern examples' check). The same must never
    happen on a real line: every line of every public excerpt is found as the per-line fallback finds it."""
    data = b"\n".join(f.read_bytes() for f in sorted(SAMPLES.glob("public-*/pasted.log")))
    fast = _hits(scan.Scanner(PATTERNS), data)
    monkeypatch.setattr(scan, "hyperscan", None)
    slow = _hits(scan.Scanner(PATTERNS), data)
    assert len(slow) > 5_000 and not sorted(set(slow) - set(fast))[:5]


@pytest.mark.skipif(scan.hyperscan is None, reason="hyperscan not installed: nothing is cached")
def test_cached_prefilter_finds_what_a_fresh_compile_finds(tmp_path, monkeypatch):
    """The compiled prefilter is reused between runs; a cached copy (or a corrupt cache file) must never
    change what is found."""
    data = (SAMPLES / "slurm-hang-stalled-rank" / "slurm-5.err").read_bytes()
    monkeypatch.setenv("DIAGNOSE_CACHE", "off")
    fresh = _hits(scan.Scanner(PATTERNS), data)
    monkeypatch.setenv("DIAGNOSE_CACHE", str(tmp_path))
    first = _hits(scan.Scanner(PATTERNS), data)  # compiles and writes the cache
    cached = list(tmp_path.glob("prefilter-*.hsdb"))
    assert len(cached) == 1
    again = _hits(scan.Scanner(PATTERNS), data)  # loads it
    cached[0].write_bytes(b"not a database")
    after_corruption = _hits(scan.Scanner(PATTERNS), data)
    assert fresh and fresh == first == again == after_corruption


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_relaxed_prefilter_matches_every_must_match_example(pattern):
    loose = regex.compile(relax(GROUP_NAME.sub("(", pattern.regex).removeprefix("^")))
    for example in pattern.examples:
        if example.should_match:
            assert loose.search(example.text), example.text


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(REAL_LINES), st.sampled_from(PATTERNS))
def test_relaxed_prefilter_never_misses_a_real_line(line, pattern):
    exact = pattern.compiled.search(scan.split_prefix(line)[1])
    loose = regex.search(relax(GROUP_NAME.sub("(", pattern.regex).removeprefix("^")), line)
    assert exact is None or loose is not None
