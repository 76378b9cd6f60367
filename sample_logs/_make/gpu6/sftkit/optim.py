import logging
import math

import torch

logger = logging.getLogger(__name__)


def build_optimizer(cfg, model, device):
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    betas = tuple(cfg.optim.betas)
    if cfg.optim.fused:
        try:
            from sftkit.ops import _fused_adam  # built by tools/build_ops.py
        except ModuleNotFoundError:
            logger.warning("sftkit.ops._fused_adam is not built; falling back to torch.optim.AdamW")
        else:
            return _fused_adam.FusedAdamW(groups, lr=cfg.train.lr, betas=betas)
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=betas,
                             fused=device.type == "cuda")


def build_scheduler(cfg, optimizer):
    warm, total = cfg.train.warmup_steps, cfg.train.steps

    def f(step):
        if step < warm:
            return (step + 1) / max(warm, 1)
        prog = (step - warm) / max(total - warm, 1)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)
