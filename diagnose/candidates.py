"""What the decision works on: one observation of a failure (a candidate) and the same failure seen on
many ranks or in many copies (an incident)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import regex

from diagnose.patterns import Pattern
from diagnose.prefixes import ANSI_CODE

Row = dict[str, Any]
_DIGITS = regex.compile(r"\d+")
# what CUDA's out-of-memory message adds after the request (the GPU's free memory, every process using it) is the
# device's state, which differs from rank to rank: the same failed request on several ranks is one incident
_OOM_STATE = regex.compile(r"(?<=Tried to allocate [\d.]+ [KMGT]?i?B)\..*")
# Ray folds a line many workers printed into one copy: `... [repeated 3x across cluster]` (the first time with a note
# on how to turn it off). The copy is the same failure as the workers' own lines.
_RAY_REPEATED = regex.compile(f"(?:{ANSI_CODE})*" + r" \[repeated \d+x across cluster\].*$")
GENERIC_PRIORITY = 20  # below this a signature is a catch-all (patterns/README.md)
# the subcategory of a SIGABRT exit that is a rank's own NCCL watchdog taking it down after a collective timed out
WATCHDOG_ABORT = "watchdog_abort"


@dataclass
class Candidate:
    """One observation of a failure on one rank."""

    pattern: Pattern | None
    role: str
    category: str
    subcategory: str | None
    priority: int
    text: str
    rows: list[Row]
    rank: int | None
    host: str | None
    ts: datetime | None
    file: str
    line: int
    code_file: str | None = None
    code_line: int | None = None
    from_traceback: bool = False
    fields: dict[str, str] = field(default_factory=dict)
    phase: str | None = None
    rank_inferred: bool = False

    @property
    def signature(self) -> tuple[str, str]:
        return (
            self.pattern.id if self.pattern else self.category,
            _DIGITS.sub("N", _OOM_STATE.sub("", _RAY_REPEATED.sub("", self.text)))[:300],
        )


# failures every process meets alike before training starts (a bad argument, a missing module or script)
EVERY_PROCESS_FAILS = frozenset({"config", "import"})


@dataclass
class Incident:
    candidates: list[Candidate]

    @property
    def first(self) -> Candidate:
        """The earliest observation; ranks failing within the clock's 1 s resolution count as
        simultaneous (the same config error on every rank), and then the lowest rank is reported; so are the ranks
        of a start-up failure printed without a clock (parallel sizes that do not divide count as one)."""
        timed = [c for c in self.candidates if c.ts is not None]
        if not timed:
            one = self.candidates[0]
            startup = one.category in EVERY_PROCESS_FAILS or one.subcategory == "divisibility"
            if startup and len(self.ranks) > 1:
                # the same start-up error from several ranks: simultaneous, whatever order they were printed in
                return min(self.candidates, key=lambda c: (c.rank is None, c.rank or 0, c.file, c.line))
            # No clock: in one file the earlier line is the earlier event.
            return min(self.candidates, key=lambda c: (c.file, c.line, c.rank is None, c.rank or 0))
        start = min(c.ts for c in timed)  # type: ignore[type-var]
        pool = [c for c in timed if (c.ts - start).total_seconds() <= 1.0]  # type: ignore[operator]
        return min(pool, key=lambda c: (c.rank is None, c.rank or 0, not c.from_traceback, c.file, c.line))

    @property
    def phase(self) -> str | None:
        return next((c.phase for c in sorted(self.candidates, key=order_key) if c.phase), None)

    @property
    def ranks(self) -> list[int]:
        return sorted({c.rank for c in self.candidates if c.rank is not None})

    @property
    def ts(self) -> datetime | None:
        times = [c.ts for c in self.candidates if c.ts is not None]
        return min(times) if times else None


def order_key(c: Candidate) -> tuple[Any, ...]:
    return (c.ts is None, c.ts or datetime.max, c.rank is None, c.rank or 0, not c.from_traceback, c.file, c.line)
