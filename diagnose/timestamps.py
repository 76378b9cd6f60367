"""Turn the many timestamp styles of a training job into comparable datetimes.

Ranks are ordered by time to find the FIRST failure, so a glog line (`E1129 16:48:08.288000`, no
year), a torchrun summary (`2026-11-29_16:48:08`), Python logging (`2026-11-29 16:48:08,123`), ISO
8601 and error.json epochs must all land on one clock. Glog has no year; the caller supplies one
inferred from the other timestamps of the job (or the file's modification time).
"""

from __future__ import annotations

from datetime import UTC, datetime

import regex

_ISO = regex.compile(
    r"(?<!\d)(?P<y>20\d\d)(?P<sep>[-/])(?P<mo>\d\d)(?P=sep)(?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?"
)
_GLOG = regex.compile(
    r"(?<![\w])[IWEF](?P<mo>1[0-2]|0[1-9]|[1-9])(?P<d>[0-3]\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,9}))?"
)


def _build(year: int, m: regex.Match[str]) -> datetime | None:
    fraction = (m["f"] or "0")[:6].ljust(6, "0")
    try:
        return datetime(year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), int(fraction))
    except ValueError:
        return None


def parse_time(text: str, default_year: int) -> datetime | None:
    """The first timestamp in `text` (naive, in the job's local clock), or None."""
    if (m := _ISO.search(text)) is not None:
        return _build(int(m["y"]), m)
    if (m := _GLOG.search(text)) is not None:
        return _build(default_year, m)
    return None


def year_of(text: str) -> int | None:
    m = _ISO.search(text)
    return int(m["y"]) if m else None


def from_epoch(seconds: float) -> datetime | None:
    """error.json stamps are epoch seconds; logs print local wall time, which we assume is UTC here. A stamp no
    clock can hold (a corrupt or hostile file) is no time at all."""
    try:
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None
