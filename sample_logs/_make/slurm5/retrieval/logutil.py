"""Loguru-style console lines for the stdlib logger.

    2025-06-02 14:03:11.482 | INFO     | r2/4 | retrieval.train:fit:142 - message
"""
import logging
import os
import sys
import time


class _Fmt(logging.Formatter):
    def __init__(self, rank, world):
        super().__init__()
        self.tag = f"r{rank}/{world}" if world > 1 else "r0"

    def format(self, record):
        t = time.localtime(record.created)
        ts = time.strftime("%Y-%m-%d %H:%M:%S", t) + f".{int(record.msecs):03d}"
        msg = record.getMessage()
        line = f"{ts} | {record.levelname:<8} | {self.tag} | {record.name}:{record.funcName}:{record.lineno} - {msg}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(rank, world, level=None):
    level = level or os.environ.get("RETRIEVAL_LOG_LEVEL", "INFO")
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(_Fmt(rank, world))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(level)
    # quieter third-party loggers on non-zero ranks
    if rank != 0:
        logging.getLogger("retrieval.data").setLevel(logging.WARNING)
