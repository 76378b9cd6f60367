#!/usr/bin/env python
"""clipforge entry point.

    torchrun --nproc-per-node=2 train.py --config configs/vit_s8.json train.max_steps=40
    python train.py --spawn 2 --config configs/vit_s8.json        # torch.multiprocessing.spawn
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

from clipforge import __version__  # noqa: E402
from clipforge import dist as d  # noqa: E402
from clipforge.config import load_config, to_dict  # noqa: E402
from clipforge.trainer import Trainer  # noqa: E402

log = logging.getLogger("clipforge")


class _RankFilter(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank: int, output_dir: str) -> None:
    fmt = logging.Formatter("%(asctime)s | %(levelname)-7s | rank%(rank)s | %(name)s:%(lineno)d - %(message)s",
                            datefmt="%Y-%m-%d %H:%M:%S")
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stdout)
    console.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    console.setFormatter(fmt)
    console.addFilter(_RankFilter(rank))
    root.addHandler(console)
    os.makedirs(os.path.join(output_dir, "logs"), exist_ok=True)
    fh = logging.FileHandler(os.path.join(output_dir, "logs", f"rank{rank}.log"))
    fh.setFormatter(fmt)
    fh.addFilter(_RankFilter(rank))
    root.addHandler(fh)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="clipforge contrastive trainer")
    p.add_argument("--config", default=os.path.join(HERE, "configs", "vit_s8.json"))
    p.add_argument("--spawn", type=int, default=0, help="launch N ranks with torch.multiprocessing.spawn")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. optim.lr=1e-3")
    return p.parse_args(argv)


def run(local_rank=None, rank=None, world=None, args=None):
    faulthandler.enable()
    cfg = load_config(args.config, args.overrides)
    r = rank if rank is not None else d.env_int("RANK", 0)
    setup_logging(r, cfg.train.output_dir)
    if r == 0:
        log.info("clipforge %s | python %s | torch %s | cuda %s | host %s", __version__,
                 platform.python_version(), torch.__version__, torch.version.cuda, platform.node())
        log.info("config:\n%s", json.dumps(to_dict(cfg), indent=2))
    device = d.init_distributed(cfg, local_rank, rank, world)
    trainer = Trainer(cfg, device)
    trainer.train()
    dist.barrier()
    dist.destroy_process_group()


def _spawn_entry(local_rank, world, args):
    run(local_rank, local_rank, world, args)


@record
def main(argv=None):
    args = parse_args(argv)
    if args.spawn:
        import torch.multiprocessing as mp
        mp.spawn(_spawn_entry, args=(args.spawn, args), nprocs=args.spawn, join=True)
    else:
        run(args=args)


if __name__ == "__main__":
    main()
