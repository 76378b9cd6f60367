#!/usr/bin/env python
"""ddpmlite: DDPM training.

    torchrun --nproc-per-node=2 train.py --config configs/base.json train.max_steps=100
    python train.py --spawn 2 --config configs/base.json      # torch.multiprocessing.spawn
"""
import argparse
import json
import logging
import os
import sys

import torch
from torch.distributed.elastic.multiprocessing.errors import record

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddpmlite import __version__  # noqa: E402
from ddpmlite.config import load_config, to_dict  # noqa: E402
from ddpmlite.trainer import Trainer  # noqa: E402


class _RankFilter(logging.Filter):
    def filter(self, rec):
        rec.rank = os.environ.get("RANK", "0")
        return True


def setup_logging():
    h = logging.StreamHandler(sys.stdout)
    h.addFilter(_RankFilter())
    h.setFormatter(logging.Formatter("[%(asctime)s][rank%(rank)s][%(name)s][%(levelname)s] %(message)s",
                                     datefmt="%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(logging.INFO)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default=None)
    p.add_argument("--spawn", type=int, default=0, help="start N local ranks with torch.multiprocessing.spawn")
    p.add_argument("overrides", nargs="*", help="section.key=value, e.g. train.max_steps=100")
    return p.parse_args()


def run(args):
    setup_logging()
    log = logging.getLogger("ddpmlite")
    cfg = load_config(args.config, args.overrides)
    if int(os.environ.get("RANK", 0)) == 0:
        log.info("ddpmlite %s | torch %s | cuda %s | world_size %s", __version__, torch.__version__,
                 torch.version.cuda, os.environ.get("WORLD_SIZE", 1))
        log.info("config: %s", json.dumps(to_dict(cfg), sort_keys=True))
    tr = Trainer(cfg)
    tr.setup()
    tr.train()
    tr.close()


def _spawn_entry(local_rank, args, world):
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world))
    run(args)


@record
def main():
    args = parse()
    if args.spawn:
        import torch.multiprocessing as mp
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        mp.spawn(_spawn_entry, args=(args, args.spawn), nprocs=args.spawn, join=True)
    else:
        run(args)


if __name__ == "__main__":
    main()
