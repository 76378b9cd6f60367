"""JSON-lines logging: one object per line, with host and rank, the way our log shipper wants it."""
import json
import logging
import os
import socket
import sys
import time


class JsonFormatter(logging.Formatter):
    def __init__(self, rank, world):
        super().__init__()
        self.rank, self.world = rank, world
        self.host = socket.gethostname().split(".")[0]

    def format(self, record):
        obj = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}",
            "lvl": record.levelname,
            "host": self.host,
            "rank": self.rank,
            "world": self.world,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "kv", None)
        if extra:
            obj.update(extra)
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def setup(rank, world, level=None):
    level = level or os.environ.get("TSF_LOG_LEVEL", "INFO")
    h = logging.StreamHandler(sys.stdout)
    h.setFormatter(JsonFormatter(rank, world))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(level)
    return logging.getLogger("tsf")


def kv(logger, msg, **fields):
    logger.info(msg, extra={"kv": fields})
