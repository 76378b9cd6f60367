"""Exponential moving average of the model weights (kept on every rank, in the model's device)."""
from __future__ import annotations

import torch


class ModelEma:
    def __init__(self, model, decay=0.999):
        self.decay = decay
        self.updates = 0
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))   # warm-up of the decay
        for k, v in model.state_dict().items():
            s = self.shadow[k]
            if s.dtype.is_floating_point:
                s.mul_(d).add_(v.detach(), alpha=1.0 - d)
            else:
                s.copy_(v)

    def copy_to(self, model):
        model.load_state_dict(self.shadow)

    def state_dict(self):
        return {"decay": self.decay, "updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state):
        self.decay = state["decay"]
        self.updates = state["updates"]
        self.shadow = {k: v.detach().clone() for k, v in state["shadow"].items()}
