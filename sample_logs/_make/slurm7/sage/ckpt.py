"""Checkpoints: model/optimizer state plus training state."""
import logging
import os

import torch

log = logging.getLogger("sage.ckpt")


def save(path, model, opt, epoch, step, best, cfg):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": epoch,
                "step": step, "best": best, "config": cfg}, tmp)
    os.replace(tmp, path)
    log.info("saved %s (epoch %d, step %d)", path, epoch, step)


def load(path):
    log.info("loading %s", path)
    return torch.load(path, map_location="cpu")
