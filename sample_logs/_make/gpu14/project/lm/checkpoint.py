"""Save / resume training state."""
from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger(__name__)


def save(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, config: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "config": config,
    }
    torch.save(state, path)
    logger.info("saved checkpoint %s (step %d, %.1f MB)", path, step, os.path.getsize(path) / 2**20)


def resolve(resume: str, out_dir: str) -> str | None:
    if not resume:
        return None
    if resume == "auto":
        path = os.path.join(out_dir, "ckpt.pt")
        return path if os.path.exists(path) else None
    return resume


def load(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    logger.info("resuming from %s", path)
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = int(state["step"])
    logger.info("resumed at step %d", step)
    return step
