"""Checkpoint manager: <ckpt_dir>/step_000020/{model.pt,optim.pt,trainer_state.json}, `latest` file."""
import json
import logging
import os
import shutil

import torch

log = logging.getLogger("lmtrain.ckpt")


class CheckpointManager:
    def __init__(self, root, keep_last=3, rank=0):
        self.root = root
        self.keep_last = keep_last
        self.rank = rank
        os.makedirs(root, exist_ok=True)

    def _dir(self, step):
        return os.path.join(self.root, f"step_{step:06d}")

    def save(self, step, model, optimizer, scheduler, extra):
        if self.rank != 0:
            return
        d = self._dir(step)
        tmp = d + ".tmp"
        os.makedirs(tmp, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(tmp, "model.pt"))
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                   os.path.join(tmp, "optim.pt"))
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": step, **extra}, f)
        os.replace(tmp, d)
        with open(os.path.join(self.root, "latest"), "w") as f:
            f.write(os.path.basename(d))
        log.info("saved checkpoint %s", d)
        self._prune()

    def _prune(self):
        steps = sorted(x for x in os.listdir(self.root) if x.startswith("step_") and not x.endswith(".tmp"))
        for x in steps[: -self.keep_last]:
            shutil.rmtree(os.path.join(self.root, x), ignore_errors=True)

    def resolve(self, spec):
        if spec == "latest":
            p = os.path.join(self.root, "latest")
            if not os.path.exists(p):
                return None
            with open(p) as f:
                return os.path.join(self.root, f.read().strip())
        return spec

    def load(self, path, model, optimizer, scheduler, device):
        log.info("resuming from %s", path)
        sd = torch.load(os.path.join(path, "model.pt"), map_location=device, weights_only=True)
        model.load_state_dict(sd)
        osd = torch.load(os.path.join(path, "optim.pt"), map_location=device, weights_only=True)
        optimizer.load_state_dict(osd["optimizer"])
        scheduler.load_state_dict(osd["scheduler"])
        with open(os.path.join(path, "trainer_state.json")) as f:
            return json.load(f)
