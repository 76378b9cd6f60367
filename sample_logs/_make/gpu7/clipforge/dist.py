"""Process-group setup and small collective helpers."""
from __future__ import annotations

import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("clipforge.dist")


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else default


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def is_last() -> bool:
    return rank() == world_size() - 1


def init_distributed(cfg, local_rank: int | None = None, rank_: int | None = None, world: int | None = None):
    """Initialise torch.distributed from torchrun env vars (or explicit spawn args)."""
    if local_rank is None:
        local_rank = env_int("LOCAL_RANK", 0)
    if rank_ is None:
        rank_ = env_int("RANK", 0)
    if world is None:
        world = env_int("WORLD_SIZE", 1)
    os.environ.setdefault("MASTER_ADDR", cfg.dist.master_addr)
    os.environ.setdefault("MASTER_PORT", str(cfg.dist.master_port))

    use_cuda = torch.cuda.is_available()
    backend = cfg.dist.backend
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    log.info("initializing process group: backend=%s rank=%d/%d local_rank=%d master=%s:%s",
             backend, rank_, world, local_rank, os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    kwargs = dict(backend=backend, rank=rank_, world_size=world,
                  timeout=timedelta(seconds=cfg.dist.timeout_s))
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    return device


def all_reduce_mean(t: torch.Tensor) -> torch.Tensor:
    if world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= world_size()
    return t


class GatherLayer(torch.autograd.Function):
    """all_gather that keeps the autograd graph for the local slice (open_clip style)."""

    @staticmethod
    def forward(ctx, x):
        out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x.contiguous())
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        all_grads = torch.stack(grads)
        dist.all_reduce(all_grads)
        return all_grads[dist.get_rank()]


def gather_features(x: torch.Tensor, with_grad: bool) -> torch.Tensor:
    if world_size() == 1:
        return x
    if with_grad:
        return torch.cat(GatherLayer.apply(x), dim=0)
    out = [torch.zeros_like(x) for _ in range(world_size())]
    dist.all_gather(out, x)
    out[rank()] = x
    return torch.cat(out, dim=0)
