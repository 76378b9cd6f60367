#!/usr/bin/env python
"""vitrain: Vision Transformer image classification.

    torchrun --nproc-per-node 2 train.py --config configs/base.toml train.max_steps=500
    python train.py --spawn 2 --config configs/base.toml                        # torch.multiprocessing.spawn
    python train.py --rank 0 --world-size 2 --config configs/base.toml &       # one process per rank, by hand
    python train.py --rank 1 --world-size 2 --config configs/base.toml
"""
import argparse
import json
import logging
import os
import sys

import torch
from torch.distributed.elastic.multiprocessing.errors import record

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vitrain import __version__  # noqa: E402
from vitrain.config import load_config, to_dict  # noqa: E402
from vitrain.engine import Trainer  # noqa: E402
from vitrain.logutil import setup_logging  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description="ViT trainer")
    p.add_argument("--config", default="configs/base.toml")
    p.add_argument("--spawn", type=int, default=0, help="start N local ranks with torch.multiprocessing.spawn")
    p.add_argument("--rank", type=int, default=None, help="this process's rank (no launcher)")
    p.add_argument("--world-size", type=int, default=None, help="number of ranks (no launcher)")
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("overrides", nargs="*", help="section.key=value, e.g. train.max_steps=500")
    return p.parse_args()


def run(args):
    setup_logging()
    log = logging.getLogger("vitrain")
    cfg = load_config(args.config, args.overrides)
    log.info("vitrain %s | torch %s | cuda %s | rank %s/%s pid %d", __version__, torch.__version__,
             torch.version.cuda, os.environ.get("RANK", 0), os.environ.get("WORLD_SIZE", 1), os.getpid())
    if int(os.environ.get("RANK", 0)) == 0:
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
        os.environ.setdefault("MASTER_ADDR", args.master_addr)
        os.environ.setdefault("MASTER_PORT", str(args.master_port))
        mp.spawn(_spawn_entry, args=(args, args.spawn), nprocs=args.spawn, join=True)
        return
    if args.rank is not None:
        os.environ.update(RANK=str(args.rank), LOCAL_RANK=str(args.rank), WORLD_SIZE=str(args.world_size or 1),
                          MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port))
    run(args)


if __name__ == "__main__":
    main()
