"""glog-style log lines that carry the rank and the world size:

    I1201 06:30:00.123 41873 [1/2] engine.py:212] step 10/200 epoch 0 loss 2.3011 ...
"""
import logging
import os
import sys


class _RankWorld(logging.Filter):
    def filter(self, record):
        record.rank = os.environ.get("RANK", "0")
        record.world = os.environ.get("WORLD_SIZE", "1")
        return True


def setup_logging(level=logging.INFO):
    h = logging.StreamHandler(sys.stdout)
    h.addFilter(_RankWorld())
    h.setFormatter(logging.Formatter(
        "%(levelname).1s%(asctime)s.%(msecs)03d %(process)d [%(rank)s/%(world)s] %(filename)s:%(lineno)d] %(message)s",
        datefmt="%m%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(level)
    logging.captureWarnings(True)
