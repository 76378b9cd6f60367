"""Find the few lines that matter in a whole file at once, then match patterns on those lines only.

A Python loop over every line was measured 40-90x slower than ripgrep (shared/reference/performance.md);
one compiled multi-pattern scan over the raw bytes runs near ripgrep's speed. So hyperscan scans the
whole buffer for every pattern at once, and only the hit lines are decoded, prefix-stripped and matched
with the exact `regex` pattern (which also yields the named fields). Without hyperscan (a platform with
no wheel) the same prefilter runs through `regex`, slower but with identical results.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import regex

from diagnose.cache import cache_file, write_atomically
from diagnose.patterns import GROUP_NAME, Pattern, PatternError
from diagnose.prefixes import Prefix, split_glued, split_prefix
from diagnose.relax import relax

try:  # optional speed-up; results are identical without it
    import hyperscan
except ImportError:  # pragma: no cover - exercised only where no wheel exists
    hyperscan = None

# Structural anchors: lines the parsers need even when no signature names them.
# Anchors and pattern regexes must not use ^ (except a leading one) or $: the prefilter sees raw lines
# that still carry launcher prefixes.
ANCHORS = {
    "traceback": r"Traceback \(most recent call last\)",
    # a summary block, or only the tail of one pasted without its header (`rank : 0 (local_rank: 0)`)
    "child-failed": r"Root Cause \(first observed failure\)|ChildFailedError|rank *: \d+ \(local_rank: \d+\)",
    # mpirun / horovodrun naming the first process that exited non-zero (its name and code follow)
    "first-process": r"The first process to do so was:",
    # Open MPI's report of a rank that called MPI_ABORT (its error code on the next line)
    "mpi-abort": r"MPI_ABORT was invoked on rank \d+ in communicator",
}

MATCH_LIMIT = 4000  # real error lines are shorter; a runaway line must not make a regex backtrack for minutes

# an exception line with its type and no message (the message began with a newline)
_EMPTY_MESSAGE = regex.compile(r" {0,3}(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception):\s*")
# the message on the next line starts at its first column with a word; the next frame, traceback or exception does
# not count (nor an error file's JSON, indented or quoted)
_MESSAGE_BELOW = regex.compile(r"[A-Za-z0-9]")
_NOT_A_MESSAGE = regex.compile(r"(?:Traceback \(|During handling|The above exception|[\w.]+(?:Error|Exception):)")


@dataclass(frozen=True)
class Hit:
    """One line that matched at least one pattern (or anchor)."""

    line_no: int  # 1-based
    start: int  # byte offset of the line in the file
    raw: str
    prefix: Prefix
    text: str
    pattern_ids: tuple[str, ...]
    fields: tuple[tuple[str, dict[str, str]], ...]


def _prefilter_expression(expression: str) -> str:
    # Hyperscan ignores captures but rejects Python's named-group syntax; a leading ^ must go because
    # the raw line still carries launcher prefixes that the exact match strips first.
    expression = GROUP_NAME.sub("(", expression)
    return relax(expression[1:] if expression.startswith("^") else expression)


def _cache_file(expressions: list[str]) -> Path | None:
    """Where a compiled database for exactly these expressions is kept between runs (compiling ~120
    expressions takes ~0.3 s, a third of a small run)."""
    return cache_file("prefilter", [getattr(hyperscan, "__version__", "?"), *expressions], ".hsdb")


def _load_or_compile(expressions: list[str], names: list[str]) -> object:
    """The compiled prefilter, from the cache when it holds one for these expressions; any cache problem
    (unwritable home, a corrupt file, another hyperscan build) falls back to compiling."""
    path = _cache_file(expressions)
    if path is not None:
        try:
            return hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
        except Exception:  # noqa: BLE001 - a missing or unreadable cache is the normal first run
            pass
    database = _compile_database(expressions, names)
    if path is not None:
        write_atomically(path, hyperscan.dumpb(database))
    return database


def _compile_database(expressions: list[str], names: list[str]) -> object:
    def build(items: list[str]) -> object:
        database = hyperscan.Database()
        database.compile(
            expressions=[e.encode() for e in items],
            ids=list(range(len(items))),
            elements=len(items),
            flags=[0] * len(items),
        )
        return database

    try:
        return build(expressions)
    except hyperscan.error:
        for name, expression in zip(names, expressions, strict=True):
            try:
                build([expression])
            except hyperscan.error as exc:
                raise PatternError(f"pattern {name!r}: the prefilter cannot compile its regex: {exc}") from exc
        raise


class Scanner:
    """Compiled once per pattern set; `scan` is safe to call from several threads."""

    def __init__(self, patterns: Sequence[Pattern], anchors: dict[str, str] | None = None) -> None:
        self.patterns = {p.id: p for p in patterns}
        self.anchors = dict(ANCHORS if anchors is None else anchors)
        self._names = list(self.patterns) + list(self.anchors)
        expressions = [_prefilter_expression(p.regex) for p in patterns]
        expressions += [_prefilter_expression(a) for a in self.anchors.values()]
        self._expressions = expressions
        self._database = None
        if hyperscan is not None:
            self._database = _load_or_compile(expressions, self._names)
        self._fallback: list[regex.Pattern[bytes]] | None = None  # compiled only where hyperscan is missing
        self._fallback_any: regex.Pattern[bytes] | None = None
        self._fallback_lock = threading.Lock()
        self._local = threading.local()

    def _scratch(self) -> object:
        """Hyperscan scratch space is per thread: sharing one raises ScratchInUseError."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch

    def _raw_hits(self, data: bytes) -> dict[int, set[int]]:
        """Map line-end offsets of matching lines to the indexes of the expressions that hit them."""
        ends: list[tuple[int, int]] = []
        if self._database is not None:

            def on_match(index: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                ends.append((end, index))

            self._database.scan(data, match_event_handler=on_match, scratch=self._scratch())
        else:
            ends = self._fallback_hits(data)
        by_line: dict[int, set[int]] = {}
        line_start, searched_to = 0, 0
        for end, index in sorted(ends):
            # Walk forward once: each byte is searched for a newline at most once, however many hits.
            newline = data.rfind(b"\n", searched_to, max(end - 1, searched_to))
            if newline >= 0:
                line_start = newline + 1
            searched_to = max(searched_to, end - 1)
            by_line.setdefault(line_start, set()).add(index)
        return by_line

    def _fallback_regexes(self) -> tuple[list[regex.Pattern[bytes]], regex.Pattern[bytes]]:
        with self._fallback_lock:
            if self._fallback is None or self._fallback_any is None:
                encoded = [e.encode("utf-8") for e in self._expressions]
                self._fallback = [regex.compile(e) for e in encoded]
                self._fallback_any = regex.compile(b"|".join(b"(?:" + e + b")" for e in encoded))
            return self._fallback, self._fallback_any

    def _fallback_hits(self, data: bytes) -> list[tuple[int, int]]:
        """Line by line with `regex`: slower, but each line is cut at MATCH_LIMIT so no regex can
        backtrack across a runaway line."""
        fallback, fallback_any = self._fallback_regexes()
        ends: list[tuple[int, int]] = []
        start = 0
        for line in data.split(b"\n"):
            piece = line[:MATCH_LIMIT]
            if fallback_any.search(piece) is not None:
                ends.extend((start + 1, index) for index, rx in enumerate(fallback) if rx.search(piece))
            start += len(line) + 1
        return ends

    def scan(self, data: bytes) -> list[Hit]:
        """Every line of `data` that an expression hits, in file order, with exact pattern matches."""
        by_line = self._raw_hits(data)
        hits: list[Hit] = []
        line_no, counted_to = 1, 0
        for start in sorted(by_line):
            line_no += data.count(b"\n", counted_to, start)
            counted_to = start
            end = data.find(b"\n", start)
            raw = data[start : end if end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
            for offset, piece in split_glued(raw):
                at = start + len(raw[:offset].encode("utf-8"))
                hit = self.match_line(piece, line_no=line_no, start=at, indexes=by_line[start])
                if hit is not None and _EMPTY_MESSAGE.fullmatch(hit.text):
                    hit = self._with_message_below(hit, data, end) or hit
                if hit is not None:
                    hits.append(hit)
        return hits

    def _with_message_below(self, hit: Hit, data: bytes, end: int) -> Hit | None:
        """`raise ImportError("\\nDeepSpeed is not installed ...")` prints the exception's type alone on its line
        and the message on the next: the two lines together are the error the signatures know."""
        if end < 0:
            return None
        below_end = data.find(b"\n", end + 1)
        below = data[end + 1 : below_end if below_end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
        prefix, text = split_prefix(below[:MATCH_LIMIT])
        if prefix.stream_key != hit.prefix.stream_key or not _MESSAGE_BELOW.match(text) or _NOT_A_MESSAGE.match(text):
            return None
        joined = self.match_line(f"{hit.raw.rstrip()} {text.strip()}", line_no=hit.line_no, start=hit.start)
        return joined if joined is not None and joined.prefix == hit.prefix else None

    def match_line(self, raw: str, *, line_no: int = 1, start: int = 0, indexes: set[int] | None = None) -> Hit | None:
        """The exact match of one line; production and the pattern-example tests both come here."""
        if indexes is None:
            indexes = set(self._raw_hits(raw.encode("utf-8")).get(0, set()))
        prefix, text = split_prefix(raw[:MATCH_LIMIT])
        ids: list[str] = []
        fields: list[tuple[str, dict[str, str]]] = []
        for index in sorted(indexes):
            name = self._names[index]
            pattern = self.patterns.get(name)
            if pattern is None:
                if regex.search(self.anchors[name], text) or regex.search(self.anchors[name], raw):
                    ids.append(name)
                continue
            found = pattern.fields(text)
            if found is not None:
                ids.append(name)
                fields.append((name, found))
        if not ids:
            return None
        return Hit(line_no, start, raw, prefix, text, tuple(ids), tuple(fields))
