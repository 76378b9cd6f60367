#!/usr/bin/env python
"""Single-node launcher without torchrun: one process per GPU via torch.multiprocessing.spawn.

    python launch_spawn.py --nprocs 2 --config configs/chat_lora.yaml [overrides]
"""
import argparse
import os
import sys

import torch
import torch.multiprocessing as mp


def worker(local_rank, nprocs, argv):
    os.environ["RANK"] = str(local_rank)
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["WORLD_SIZE"] = str(nprocs)
    import train
    cfg = train.parse_args(argv)
    train.run(cfg)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=torch.cuda.device_count() or 2)
    p.add_argument("--master-addr", default="127.0.0.1")
    args, rest = p.parse_known_args()
    os.environ.setdefault("MASTER_ADDR", args.master_addr)
    mp.spawn(worker, args=(args.nprocs, rest), nprocs=args.nprocs, join=True)
