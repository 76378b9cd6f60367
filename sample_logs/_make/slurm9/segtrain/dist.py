import datetime
import os

import torch.distributed as dist


def env():
    """rank / world / local rank from torchrun or from SLURM when srun starts the ranks itself."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), int(os.environ.get("SLURM_LOCALID", 0))
    return 0, 1, 0


def init(rank, world, timeout_s):
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))


def all_reduce_(t):
    if dist.is_initialized():
        dist.all_reduce(t)
    return t


def barrier():
    if dist.is_initialized():
        dist.barrier()
