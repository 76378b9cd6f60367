"""The result objects every stage hands on: renderers see only these, never a frame.

Frozen dataclasses keep a diagnosis immutable once decided, so the terminal, Markdown and JSON views
cannot drift apart by mutating shared state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CATEGORIES = (
    "oom",
    "shape",
    "import",
    "nccl",
    "hang",
    "cuda_error",
    "killed",
    "data",
    "checkpoint",
    "config",
    "code",
    "unknown",
    "ok",
)
ROLES = ("root", "symptom", "context")
CONFIDENCE = ("high", "medium", "low")


@dataclass(frozen=True)
class Location:
    file: str
    line: int


@dataclass(frozen=True)
class Evidence:
    file: str
    line: int
    rank: int | None
    text: str


@dataclass(frozen=True)
class Symptom:
    kind: str
    ranks: tuple[int, ...]
    count: int
    example: str


@dataclass(frozen=True)
class Fix:
    title: str
    detail: str = ""
    command: str | None = None


@dataclass(frozen=True)
class Verdict:
    category: str
    title: str
    subcategory: str | None = None
    rank: int | None = None
    ranks: tuple[int, ...] = ()
    host: str | None = None
    exception: str | None = None
    location: Location | None = None
    time: str | None = None
    confidence: str = "low"
    pattern: str | None = None
    explanation: str = ""
    rank_inferred: bool = False  # rank computed as node index x ranks per node + local rank

    def __post_init__(self) -> None:
        # Event text keeps the log's indentation (C++ "  what():" lines, a tab after "[rank1]:"), which
        # is noise in a verdict people paste into tickets and tools compare field by field.
        if self.exception is not None:
            object.__setattr__(self, "exception", self.exception.strip() or None)


@dataclass(frozen=True)
class JobInfo:
    id: str | None = None
    state: str | None = None
    exit_code: str | None = None
    nodes: tuple[str, ...] = ()
    elapsed: str | None = None


@dataclass(frozen=True)
class RankSummary:
    expected: int | None = None
    seen: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    victims: tuple[int, ...] = ()
    silent: tuple[int, ...] = ()


@dataclass(frozen=True)
class Inputs:
    paths: tuple[str, ...]
    files: int
    bytes: int
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    inputs: Inputs
    verdict: Verdict
    job: JobInfo = field(default_factory=JobInfo)
    evidence: tuple[Evidence, ...] = ()
    symptoms: tuple[Symptom, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    fixes: tuple[Fix, ...] = ()
    ranks: RankSummary = field(default_factory=RankSummary)
