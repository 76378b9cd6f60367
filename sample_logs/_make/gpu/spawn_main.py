"""Start train.py's main() in one process per GPU with torch.multiprocessing.spawn, as scripts that launch
themselves do (no torchrun: no agent, no failure summary, no rank prefixes unless torch adds them).

The parent sets MASTER_ADDR/MASTER_PORT; each child gets RANK/LOCAL_RANK/WORLD_SIZE for env:// init.
"""

import os
import sys

import torch.multiprocessing as mp


def worker(local_rank, world):
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train

    train.main()


if __name__ == "__main__":
    nprocs = int(os.environ.get("NPROC", "2"))
    mp.spawn(worker, args=(nprocs,), nprocs=nprocs)
