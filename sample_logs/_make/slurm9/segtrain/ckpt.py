import glob
import logging
import os

import torch

log = logging.getLogger("segtrain.ckpt")


def save(model, opt, epoch, step, ckpt_dir, keep_last):
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, "epoch_%d.pt" % epoch)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch, "step": step}, path)
    with open(os.path.join(ckpt_dir, "latest"), "w") as f:
        f.write(os.path.basename(path) + "\n")
    log.info("saved %s", path)
    if keep_last > 0:
        old = sorted(glob.glob(os.path.join(ckpt_dir, "epoch_*.pt")))[:-keep_last]
        for p in old:
            os.remove(p)
            log.info("retention: removed %s", os.path.basename(p))
    return path


def resume(ckpt_dir):
    marker = os.path.join(ckpt_dir, "latest")
    if not os.path.exists(marker):
        return None
    with open(marker) as f:
        name = f.read().strip()
    path = os.path.join(ckpt_dir, name)
    log.info("resuming from %s", path)
    return torch.load(path, map_location="cpu", weights_only=True)
