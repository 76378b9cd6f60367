"""Process-group setup for torchrun / mp.spawn launches; DDP or FSDP2 wrapping."""
from __future__ import annotations

import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("ditlite.dist")


class DistEnv:
    def __init__(self, rank=0, world=1, local_rank=0, device=torch.device("cpu")):
        self.rank, self.world, self.local_rank, self.device = rank, world, local_rank, device

    @property
    def is_main(self):
        return self.rank == 0


def init_distributed(timeout_s: int) -> DistEnv:
    if "RANK" not in os.environ:
        return DistEnv()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and os.environ.get("DITLITE_FORCE_CPU", "0") != "1"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", timeout=timedelta(seconds=timeout_s), device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
    return DistEnv(rank, world, local_rank, device)


def barrier(env: DistEnv):
    if env.world > 1:
        if env.device.type == "cuda":
            dist.barrier(device_ids=[env.local_rank])
        else:
            dist.barrier()


def all_reduce_mean(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if env.world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= env.world
    return t


def wrap_model(model, tcfg, env: DistEnv, find_unused=False):
    if env.world == 1:
        return model
    if tcfg.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[env.local_rank] if env.device.type == "cuda" else None,
                   find_unused_parameters=find_unused)
    if tcfg.parallel == "fsdp":
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:  # torch < 2.6
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(env.device.type, (env.world,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if tcfg.precision == "bf16" else MixedPrecisionPolicy()
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return model
    raise ValueError(f"unknown parallel mode {tcfg.parallel!r}")


def unwrap(model):
    return getattr(model, "module", model)
