"""Checkpoint manager: outputs/checkpoints/step-000004/{model.pt,optim.pt,trainer_state.json} + ``latest``."""
from __future__ import annotations

import json
import logging
import os
import shutil

import torch
import torch.distributed as dist

log = logging.getLogger("tinyrl.ckpt")


class CheckpointManager:
    def __init__(self, root: str, keep: int = 2):
        self.root = os.path.join(root, "checkpoints")
        self.keep = keep

    def latest(self):
        p = os.path.join(self.root, "latest")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return os.path.join(self.root, f.read().strip())

    def save(self, step: int, model_sd: dict, optim_sd: dict, state: dict):
        if dist.get_rank() == 0:
            d = os.path.join(self.root, f"step-{step:06d}")
            os.makedirs(d, exist_ok=True)
            torch.save(model_sd, os.path.join(d, "model.pt"))
            torch.save(optim_sd, os.path.join(d, "optim.pt"))
            with open(os.path.join(d, "trainer_state.json"), "w") as f:
                json.dump(state, f, indent=1)
            with open(os.path.join(self.root, "latest"), "w") as f:
                f.write(os.path.basename(d))
            log.info("saved checkpoint %s", d)
            olds = sorted(x for x in os.listdir(self.root) if x.startswith("step-"))[:-self.keep]
            for o in olds:
                shutil.rmtree(os.path.join(self.root, o), ignore_errors=True)
        dist.barrier()

    def load(self, path: str):
        log.info("resuming from %s", path)
        model_sd = torch.load(os.path.join(path, "model.pt"), map_location="cpu", weights_only=True)
        optim_sd = torch.load(os.path.join(path, "optim.pt"), map_location="cpu", weights_only=True)
        with open(os.path.join(path, "trainer_state.json")) as f:
            state = json.load(f)
        return model_sd, optim_sd, state
