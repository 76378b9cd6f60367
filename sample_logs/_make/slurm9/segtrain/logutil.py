"""glog-style log lines: I1201 02:30:00.123456 12345 train.py:88] r1/4 message"""
import logging
import os
import sys
import time


class GlogFormatter(logging.Formatter):
    def __init__(self, tag):
        super().__init__()
        self.tag = tag

    def format(self, record):
        t = time.localtime(record.created)
        us = int((record.created - int(record.created)) * 1e6)
        head = "%s%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] %s " % (
            record.levelname[0], t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, us,
            record.process, record.filename, record.lineno, self.tag)
        msg = head + record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return msg


def setup(rank, world):
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(GlogFormatter("r%d/%d" % (rank, world)))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(os.environ.get("SEG_LOGLEVEL", "INFO"))
    return logging.getLogger("segtrain")
