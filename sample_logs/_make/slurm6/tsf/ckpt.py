import logging
import os
from pathlib import Path

import torch

log = logging.getLogger("tsf.ckpt")


def save(path, model, optim, step, scaler, cfg):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "step": step,
                "scaler": scaler, "cfg": cfg}, tmp)
    os.replace(tmp, path)
    log.info("checkpoint saved", extra={"kv": {"path": str(path), "step": step}})


def load(path):
    state = torch.load(path, map_location="cpu")
    log.info("checkpoint loaded", extra={"kv": {"path": str(path), "step": state["step"]}})
    return state
