"""Exponential moving average of the model weights."""
import copy

import torch

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class EMA:
    def __init__(self, model, decay=0.999, warmup=True, dtype="fp32"):
        self.decay = decay
        self.warmup = warmup
        self.num_updates = 0
        self.model = copy.deepcopy(model).eval()
        if dtype != "fp32":
            # keep the shadow copy in half precision to save memory
            self.model.to(dtype=_DTYPES[dtype])
        for p in self.model.parameters():
            p.requires_grad_(False)

    def current_decay(self):
        if not self.warmup:
            return self.decay
        return min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))

    @torch.no_grad()
    def update(self, model):
        self.num_updates += 1
        d = self.current_decay()
        for pe, p in zip(self.model.parameters(), model.parameters()):
            pe.lerp_(p.detach().to(pe.dtype), 1 - d)
        for be, b in zip(self.model.buffers(), model.buffers()):
            be.copy_(b)

    def state_dict(self):
        return {"model": self.model.state_dict(), "num_updates": self.num_updates}

    def load_state_dict(self, sd):
        self.model.load_state_dict(sd["model"])
        self.num_updates = sd["num_updates"]
