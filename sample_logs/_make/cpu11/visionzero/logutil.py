"""logging with a compact format; the rank goes in front of every record."""
from __future__ import annotations

import logging
import sys
import time


class _RankFilter(logging.Filter):
    def __init__(self, rank: int, world: int):
        super().__init__()
        self.tag = f"{rank}/{world}"

    def filter(self, record):
        record.rk = self.tag
        return True


def setup_logging(rank: int, world: int, level=logging.INFO):
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stdout)
    h.addFilter(_RankFilter(rank, world))
    h.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(levelname).1s [%(rk)s] %(name)s: %(message)s",
                                     datefmt="%m-%d %H:%M:%S"))
    root.addHandler(h)
    root.setLevel(level if rank == 0 else max(level, logging.WARNING) if world > 8 else level)


class Progress:
    """A tqdm-like progress line, printed every `every` steps (no carriage returns, it goes to log files)."""

    def __init__(self, total: int, desc: str, every: int = 5, stream=sys.stdout, enabled=True):
        self.total, self.desc, self.every, self.stream, self.enabled = total, desc, every, stream, enabled
        self.n = 0
        self.t0 = time.time()

    def update(self, n=1, **postfix):
        self.n += n
        if not self.enabled or (self.n % self.every and self.n != self.total):
            return
        el = time.time() - self.t0
        rate = self.n / el if el > 0 else 0.0
        frac = self.n / max(self.total, 1)
        bar = "█" * int(frac * 20) + " " * (20 - int(frac * 20))
        eta = (self.total - self.n) / rate if rate > 0 else 0
        pf = ", ".join(f"{k}={v}" for k, v in postfix.items())
        self.stream.write(f"{self.desc}: {frac * 100:3.0f}%|{bar}| {self.n}/{self.total} "
                          f"[{int(el) // 60:02d}:{int(el) % 60:02d}<{int(eta) // 60:02d}:{int(eta) % 60:02d}, "
                          f"{rate:.2f}it/s, {pf}]\n")
        self.stream.flush()
