import logging
import sys


class _RankFilter(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank=None, level="INFO", logfile=None):
    """Timestamped logging; worker processes tag every record with their Ray Train world rank."""
    fmt = "%(asctime)s %(levelname)-7s %(name)s " + ("rank=%(rank)s " if rank is not None else "") + "| %(message)s"
    handlers = [logging.StreamHandler(sys.stdout)]
    if logfile:
        handlers.append(logging.FileHandler(logfile))
    for h in handlers:
        h.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
        if rank is not None:
            h.addFilter(_RankFilter(rank))
    logging.basicConfig(level=level, handlers=handlers, force=True)
