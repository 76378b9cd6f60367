#!/usr/bin/env python
"""Train a class-conditional latent DiT.

    torchrun --nproc-per-node=2 train.py --config configs/dit_s2.yaml [--set train.lr=2e-4 ...]
    python train.py --config configs/dit_s2.yaml --spawn 2        # torch.multiprocessing.spawn
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import socket

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ditlite import __version__
from ditlite.callbacks import BestCheckpointCallback, PreviewSampleCallback, ProgressCallback
from ditlite.config import build_config, to_dict
from ditlite.dist import init_distributed
from ditlite.logutil import setup_logging
from ditlite.trainer import Trainer

log = logging.getLogger("ditlite.train")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--spawn", type=int, default=0, help="start N local processes with torch.multiprocessing.spawn")
    p.add_argument("--log-all-ranks", action="store_true")
    return p.parse_args(argv)


def run(args):
    cfg = build_config(args.config, args.overrides)
    env = init_distributed(cfg.dist.timeout_s)
    setup_logging(env.rank, args.log_all_ranks)
    if env.is_main:
        log.info("ditlite %s | torch %s | python %s | host %s | world %d | device %s", __version__,
                 torch.__version__, platform.python_version(), socket.gethostname(), env.world, env.device)
        log.info("config:\n%s", json.dumps(to_dict(cfg), indent=2))
    callbacks = [ProgressCallback(), PreviewSampleCallback(cfg.sample)]
    if cfg.checkpoint.save_best:
        callbacks.append(BestCheckpointCallback(cfg.checkpoint.save_best))
    trainer = Trainer(cfg, env, callbacks)
    trainer.fit()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _spawn_worker(local_rank, args, world):
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world))
    run(args)


@record
def main():
    args = parse_args()
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        torch.multiprocessing.spawn(_spawn_worker, args=(args, args.spawn), nprocs=args.spawn, join=True)
    else:
        run(args)


if __name__ == "__main__":
    main()
