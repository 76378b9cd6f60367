"""Checkpoints: rank 0 writes <dir>/step_NNNNNN.pt atomically and a `latest` pointer; every rank can load."""
from __future__ import annotations

import glob
import logging
import os

import torch

log = logging.getLogger(__name__)


class CheckpointManager:
    def __init__(self, directory, keep=2, rank=0):
        self.dir, self.keep, self.rank = directory, keep, rank
        os.makedirs(self.dir, exist_ok=True)

    def save(self, step, state):
        if self.rank != 0:
            return
        path = os.path.join(self.dir, f"step_{step:06d}.pt")
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        with open(os.path.join(self.dir, "latest"), "w") as f:
            f.write(os.path.basename(path) + "\n")
        log.info("saved checkpoint %s", path)
        old = sorted(glob.glob(os.path.join(self.dir, "step_*.pt")))[:-self.keep] if self.keep > 0 else []
        for p in old:
            os.remove(p)

    def resolve(self, spec):
        if spec == "latest":
            with open(os.path.join(self.dir, "latest")) as f:
                return os.path.join(self.dir, f.read().strip())
        return spec

    def load(self, spec):
        path = self.resolve(spec)
        # map to host memory first: loading straight onto the GPU doubles peak memory on resume
        state = torch.load(path, map_location="cpu", weights_only=False)
        log.info("loaded checkpoint %s (step %d)", path, state["step"])
        return state
