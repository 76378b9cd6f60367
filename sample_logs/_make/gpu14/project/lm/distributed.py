"""Process-group setup and the hand-rolled data-parallel gradient sync."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .config import SystemConfig

logger = logging.getLogger(__name__)


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(sc: SystemConfig) -> DistInfo:
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if sc.device == "cuda":
        # one GPU per rank, unless several ranks share one card
        index = 0 if sc.share_gpu else local_rank
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        if sc.gpu_memory_fraction > 0:
            torch.cuda.set_per_process_memory_fraction(sc.gpu_memory_fraction, index)
    else:
        device = torch.device("cpu")
    if "RANK" in os.environ:
        kwargs = {}
        if sc.backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(backend=sc.backend, timeout=timedelta(seconds=sc.pg_timeout_s), **kwargs)
    return DistInfo(rank, world, local_rank, device)


def broadcast_parameters(model: torch.nn.Module, info: DistInfo) -> None:
    if info.world_size == 1:
        return
    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def allreduce_gradients(model: torch.nn.Module, info: DistInfo) -> None:
    """Average gradients over ranks with one flat all-reduce (bucketed like DDP's single bucket)."""
    if info.world_size == 1:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.div_(info.world_size)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def allreduce_mean(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.world_size > 1:
        dist.all_reduce(values)
        values = values / info.world_size
    return values


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
