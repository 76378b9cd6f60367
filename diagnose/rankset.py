"""Rank sets as people read them: 0,1,2,3,7 -> "0-3,7", so 512 identical ranks are one short range.

Kept apart from the engine so renderers can use it without importing polars.
"""

from __future__ import annotations

from collections.abc import Iterable


def format_ranks(ranks: Iterable[int]) -> str:
    ordered = sorted(set(ranks))
    runs: list[tuple[int, int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
