#!/usr/bin/env python
"""Entry point for torchrun / python -m torch.distributed.run."""
import argparse
import json
import logging
import os
import platform

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from visionzero import __version__
from visionzero import dist as du
from visionzero.config import load_config
from visionzero.engine import Trainer
from visionzero.logutil import setup_logging


def parse():
    p = argparse.ArgumentParser(description="visionzero trainer")
    p.add_argument("--config", "-c", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    return p.parse_args()


def main(rank=None, world_size=None, args=None):
    args = args or parse()
    cfg = load_config(args.config, args.overrides)
    r, w = du.init_distributed(cfg.train.dist_timeout_s, rank, world_size)
    torch.set_num_threads(1)
    setup_logging(r, w)
    log = logging.getLogger("visionzero")
    if r == 0:
        log.info("visionzero %s | torch %s | python %s | host %s", __version__, torch.__version__,
                 platform.python_version(), platform.node())
        log.info("config:\n%s", json.dumps(cfg.to_dict(), indent=2))
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        if r == 0:
            log.warning("torchvision not importable (%s); using built-in tensor augmentation", e)
    trainer = Trainer(cfg)
    trainer.train()
    du.cleanup()


if __name__ == "__main__":
    record(main)()
