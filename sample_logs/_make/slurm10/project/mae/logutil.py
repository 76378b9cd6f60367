import logging
import os
import socket
import sys

_STATE = {"rank": int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0))), "world": -1}


class _RankFilter(logging.Filter):
    def filter(self, record):
        record.rank = _STATE["rank"]
        record.world = _STATE["world"]
        record.host = socket.gethostname()
        return True


def setup_logging(level=logging.INFO):
    root = logging.getLogger()
    root.setLevel(level)
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stdout)
    h.addFilter(_RankFilter())
    h.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)-7s [%(host)s r%(rank)s/%(world)s] %(name)s: %(message)s"))
    root.addHandler(h)


def set_rank(rank, world):
    _STATE["rank"] = rank
    _STATE["world"] = world
