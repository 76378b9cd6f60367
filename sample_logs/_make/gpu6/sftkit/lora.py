"""LoRA adapters: wrap selected nn.Linear modules with low-rank A/B branches."""
import logging

import torch
import torch.nn as nn

from .config import LoraConfig

logger = logging.getLogger(__name__)


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: float, fan_in_fan_out: bool = False):
        super().__init__()
        self.base = base
        self.r = r
        self.scaling = alpha / r
        self.fan_in_fan_out = fan_in_fan_out
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=5 ** 0.5)
        nn.init.zeros_(self.lora_B.weight)
        self.merged = False

    def forward(self, x):
        out = self.base(x)
        if self.merged:
            return out
        return out + self.lora_B(self.lora_A(x)) * self.scaling

    def delta_weight(self):
        delta = self.lora_B.weight @ self.lora_A.weight
        # GPT-2 style Conv1D stores weights as (in, out)
        return (delta.T if self.fan_in_fan_out else delta) * self.scaling

    @torch.no_grad()
    def merge(self):
        if not self.merged:
            self.base.weight += self.delta_weight().to(self.base.weight.dtype)
            self.merged = True


def apply_lora(model: nn.Module, cfg: LoraConfig):
    targets = set(cfg.targets)
    wrapped = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not isinstance(child, nn.Linear):
                continue
            if "all-linear" in targets or child_name in targets:
                if child_name == "lm_head" and model.cfg.tie_embeddings:
                    continue
                setattr(module, child_name, LoRALinear(child, cfg.r, cfg.alpha, cfg.fan_in_fan_out))
                wrapped.append(full)
    if cfg.freeze_base:
        for n, p in model.named_parameters():
            p.requires_grad = "lora_" in n
    logger.info("LoRA: wrapped %d modules (r=%d, alpha=%s): %s%s", len(wrapped), cfg.r, cfg.alpha,
                ", ".join(wrapped[:6]), " ..." if len(wrapped) > 6 else "")
    return model


def merge_lora(model: nn.Module):
    n = 0
    for m in model.modules():
        if isinstance(m, LoRALinear):
            m.merge()
            n += 1
    return n
