"""Rank sets as people read them: 0,1,2,3,7 -> "0-3,7", so 512 identical ranks are one short range.

Kept apart from the engine so renderers can use it without importing polars.
"""

from __future__ import annotations

from collections.abc import Iterable


def parse_ranks(text: str) -> set[int]:
    """The inverse, as launchers print rank lists (srun's `tasks 0-4,7`, `global_ranks=[0, 1]`); pieces that
    are not ranks are skipped."""
    ranks: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (high.isdigit() or not high):
            ranks.update(range(int(low), int(high or low) + 1))
    return ranks


def format_ranks(ranks: Iterable[int]) -> str:
    ordered = sorted(set(ranks))
    runs: list[tuple[int, int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
