#!/usr/bin/env python
"""Single-command launcher without torchrun: python spawn_train.py --nprocs 4 -c cfg.toml"""
import argparse
import os
import sys

import torch.multiprocessing as mp

import train


def _worker(rank, world, args):
    train.main(rank, world, args)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--port", default=os.environ.get("MASTER_PORT", "29500"))
    p.add_argument("--config", "-c", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    args = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    mp.spawn(_worker, args=(args.nprocs, args), nprocs=args.nprocs, join=True)
