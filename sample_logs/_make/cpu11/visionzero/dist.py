from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist


def init_distributed(timeout_s: int = 30, rank: int | None = None, world_size: int | None = None):
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    kwargs = {}
    if rank is not None:
        kwargs.update(rank=rank, world_size=world_size)
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return dist.get_rank(), dist.get_world_size()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def barrier():
    if dist.is_initialized():
        dist.barrier()


def all_reduce_mean(t: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= world()
    return t


def cleanup():
    if dist.is_initialized():
        dist.destroy_process_group()
