"""Checkpoints: <dir>/step_NNNNNN/state.pt and a `latest` pointer, written by rank 0."""
import logging
import os
import shutil

import torch

log = logging.getLogger("ddpmlite.ckpt")


class CheckpointManager:
    def __init__(self, root, keep_last, rank, local_rank):
        self.root = root
        self.keep_last = keep_last
        self.rank = rank
        self.local_rank = local_rank

    def save(self, step, state):
        if self.rank != 0:
            return
        d = os.path.join(self.root, f"step_{step:06d}")
        tmp = d + ".tmp"
        os.makedirs(tmp, exist_ok=True)
        torch.save(state, os.path.join(tmp, "state.pt"))
        if os.path.exists(d):
            shutil.rmtree(d)
        os.rename(tmp, d)
        with open(os.path.join(self.root, "latest"), "w") as f:
            f.write(os.path.basename(d) + "\n")
        log.info("saved checkpoint %s", d)
        old = sorted(x for x in os.listdir(self.root) if x.startswith("step_") and not x.endswith(".tmp"))
        for x in old[:-self.keep_last]:
            shutil.rmtree(os.path.join(self.root, x), ignore_errors=True)

    def resolve(self, spec):
        if spec == "latest":
            p = os.path.join(self.root, "latest")
            if not os.path.exists(p):
                return None
            with open(p) as f:
                spec = os.path.join(self.root, f.read().strip())
        return os.path.join(spec, "state.pt") if os.path.isdir(spec) else spec

    def load(self, path, device):
        log.info("resuming from %s", path)
        if device.type == "cuda":
            # checkpoints are written from rank 0's GPU; remap to this process's GPU
            map_location = {"cuda:0": f"cuda:{self.local_rank}"}
        else:
            map_location = "cpu"
        return torch.load(path, map_location=map_location)
