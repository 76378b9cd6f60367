import logging
import os
import sys
import time


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank: int, level_main=logging.INFO, level_replica=logging.WARNING):
    """Main process logs INFO, replicas only WARNING and above (HF-style)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stdout)
    h.addFilter(_RankFilter(rank))
    h.setFormatter(logging.Formatter(
        "%(asctime)s - %(levelname)s - %(name)s - [rank%(rank)d] %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S"))
    root.addHandler(h)
    root.setLevel(level_main if rank == 0 else level_replica)


def _fmt_t(s: float) -> str:
    s = int(s)
    return f"{s // 60:02d}:{s % 60:02d}"


class Progress:
    """A tqdm-like progress bar written to stderr by the main process."""

    def __init__(self, total: int, desc: str = "", enabled: bool = True, initial: int = 0):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.n = initial
        self.t0 = time.time()
        self.post = ""
        self.stream = sys.stderr
        if enabled:
            self._draw()

    def _draw(self, end=""):
        frac = self.n / max(self.total, 1)
        width = 10
        full = int(frac * width)
        bar = "\u2588" * full + (" " * (width - full))
        el = time.time() - self.t0
        rate = self.n / el if el > 0 else 0.0
        rem = (self.total - self.n) / rate if rate > 0 else 0
        rate_s = f"{rate:5.2f}it/s" if rate >= 1 or rate == 0 else f"{1 / rate:5.2f}s/it"
        post = f", {self.post}" if self.post else ""
        self.stream.write(f"\r{self.desc}{frac * 100:3.0f}%|{bar}| {self.n}/{self.total} "
                          f"[{_fmt_t(el)}<{_fmt_t(rem)}, {rate_s}{post}]{end}")
        self.stream.flush()

    def update(self, n=1, **postfix):
        if postfix:
            self.post = ", ".join(f"{k}={v}" for k, v in postfix.items())
        self.n += n
        if self.enabled:
            self._draw()

    def close(self):
        if self.enabled:
            self._draw(end="\n")
