"""Logging: `MM-DD HH:MM:SS.mmm  LEVEL  [r<rank>] name: message`; progress bars on rank 0."""
from __future__ import annotations

import logging
import sys
import time


class _RankFilter(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank: int, all_ranks: bool = False):
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stdout)
    h.addFilter(_RankFilter(rank))
    h.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d  %(levelname)-5s [r%(rank)d] %(name)s: %(message)s",
                                     datefmt="%m-%d %H:%M:%S"))
    root.addHandler(h)
    root.setLevel(logging.INFO if (rank == 0 or all_ranks) else logging.WARNING)
    logging.getLogger("ditlite").setLevel(logging.INFO if (rank == 0 or all_ranks) else logging.WARNING)


def _fmt_t(s):
    s = int(s)
    return f"{s // 60:02d}:{s % 60:02d}" if s < 3600 else f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """A tqdm-like bar that writes one line per update (log files have no carriage returns)."""

    def __init__(self, total, desc, enabled=True, stream=sys.stderr, min_interval=0.0):
        self.total, self.desc, self.enabled, self.stream = total, desc, enabled, stream
        self.t0 = time.time()
        self.last = 0.0
        self.min_interval = min_interval

    def update(self, n, **post):
        if not self.enabled:
            return
        now = time.time()
        if n < self.total and now - self.last < self.min_interval:
            return
        self.last = now
        el = now - self.t0
        rate = n / el if el > 0 else 0.0
        eta = (self.total - n) / rate if rate > 0 else 0
        pct = int(100 * n / max(self.total, 1))
        fill = int(20 * n / max(self.total, 1))
        bar = "#" * fill + "." * (20 - fill)
        extra = ", ".join(f"{k}={v}" for k, v in post.items())
        self.stream.write(f"{self.desc}: {pct:3d}%|{bar}| {n}/{self.total} [{_fmt_t(el)}<{_fmt_t(eta)}, "
                          f"{rate:.2f}it/s{', ' + extra if extra else ''}]\n")
        self.stream.flush()
