import logging

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

logger = logging.getLogger(__name__)

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard


def parallelize(model, cfg, info):
    model.to(info.device)
    if not dist.is_initialized() or info.world_size == 1:
        return model
    if cfg.parallel.mode == "fsdp":
        mp = None
        if cfg.train.precision == "bf16" and info.device.type == "cuda":
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        kw = {"mp_policy": mp} if mp is not None else {}
        for block in model.layers:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        logger.info("FSDP2: sharded %d blocks + root over %d ranks", len(model.layers), info.world_size)
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    ddp = DDP(model, device_ids=ids)
    logger.info("DDP: %d ranks, bucket_cap_mb=25", info.world_size)
    return ddp


def unwrap(model):
    return getattr(model, "module", model)
