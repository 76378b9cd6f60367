"""Gradient clipping as in the 2021 Megatron fork we started from (fp32 norm accumulation).

Kept because the loss curves of the v0.2 baselines were produced with it.
"""
import torch
from torch._six import inf


def clip_grad_norm_fp32(parameters, max_norm, norm_type=2):
    grads = [p.grad for p in parameters if p.grad is not None]
    if norm_type == inf:
        total = max(g.abs().max() for g in grads)
    else:
        total = torch.norm(torch.stack([torch.norm(g.float(), norm_type) for g in grads]), norm_type)
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads:
            g.mul_(coef)
    return total
