"""Linear warm-up followed by cosine decay to min_lr, as a LambdaLR multiplier."""
import math

from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine(optimizer, warmup_steps, total_steps, base_lr, min_lr):
    floor = min_lr / base_lr

    def f(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))

    return LambdaLR(optimizer, f)
