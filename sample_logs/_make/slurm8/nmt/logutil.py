import logging
import os
import sys


class _RankFilter(logging.Filter):
    def __init__(self, rank, world):
        super().__init__()
        self.tag = f"{rank}/{world}"

    def filter(self, record):
        record.rank = self.tag
        return True


def setup_logging(rank, world, level="INFO"):
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(_RankFilter(rank, world))
    handler.setFormatter(logging.Formatter(
        "%(asctime)s | %(levelname)s | %(rank)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("NMT_LOGLEVEL", level))
