"""Where derived data is kept between runs (the compiled prefilter, the record of a pattern library already
validated): each run of a hook or a user re-reads the same library, and compiling it is a large part of a small
run. DIAGNOSE_CACHE=off disables it; DIAGNOSE_CACHE=DIR moves it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path


def cache_file(kind: str, parts: Iterable[str], suffix: str) -> Path | None:
    """The cache entry of `kind` for exactly these inputs (a digest of them names it), or None when disabled."""
    setting = os.environ.get("DIAGNOSE_CACHE", "")
    if setting == "off":
        return None
    base = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "diagnose"
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
    return base / f"{kind}-{digest[:32]}{suffix}"


def write_atomically(path: Path, data: bytes) -> None:
    """Concurrent runs never read a half-written entry; a cache that cannot be written is simply not kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(data)
        partial.replace(path)
    except OSError:
        pass
