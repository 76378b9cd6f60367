"""Checkpoint manager: `<dir>/step_000040/{model,ema,optimizer}.pt + trainer_state.json`.
Rank 0 writes and reads; the other ranks get the state by broadcast."""
from __future__ import annotations

import json
import logging
import os
import re
import shutil

import torch
import torch.distributed as dist

from .dist import barrier

log = logging.getLogger("ditlite.checkpoint")
_STEP_RE = re.compile(r"^step_(\d+)$")


class CheckpointManager:
    def __init__(self, ccfg, env):
        self.cfg, self.env = ccfg, env
        self.dir = ccfg.dir
        os.makedirs(self.dir, exist_ok=True)

    def list_steps(self):
        out = []
        for name in os.listdir(self.dir):
            m = _STEP_RE.match(name)
            if m and os.path.isdir(os.path.join(self.dir, name)):
                out.append(int(m.group(1)))
        return sorted(out)

    def save(self, step, model, ema, optimizer, extra=None, name=None):
        path = os.path.join(self.dir, name or f"step_{step:06d}")
        if self.env.is_main:
            os.makedirs(path, exist_ok=True)
            torch.save(model.state_dict(), os.path.join(path, "model.pt"))
            torch.save(ema.state_dict(), os.path.join(path, "ema.pt"))
            torch.save(optimizer.state_dict(), os.path.join(path, "optimizer.pt"))
            with open(os.path.join(path, "trainer_state.json"), "w") as f:
                json.dump({"step": step, **(extra or {})}, f)
            log.info("saved checkpoint %s", path)
            steps = self.list_steps() if name is None else []
            for old in steps[: max(0, len(steps) - self.cfg.keep_last)]:
                shutil.rmtree(os.path.join(self.dir, f"step_{old:06d}"), ignore_errors=True)
        barrier(self.env)

    def resolve(self):
        r = self.cfg.resume
        if r in ("", "none", None):
            return None
        if r == "latest":
            steps = self.list_steps()
            return os.path.join(self.dir, f"step_{steps[-1]:06d}") if steps else None
        return r

    def load(self, model, ema, optimizer):
        path = self.resolve()
        if path is None:
            return 0
        payload = [None]
        if self.env.is_main:
            log.info("resuming from %s", path)
            state = {
                "model": torch.load(os.path.join(path, "model.pt"), map_location="cpu"),
                "ema": torch.load(os.path.join(path, "ema.pt"), map_location="cpu"),
                "optimizer": torch.load(os.path.join(path, "optimizer.pt"), map_location="cpu"),
            }
            with open(os.path.join(path, "trainer_state.json")) as f:
                state["trainer"] = json.load(f)
            payload = [state]
        if self.env.world > 1:
            dist.broadcast_object_list(payload, src=0)
        state = payload[0]
        model.load_state_dict(state["model"])
        ema.load_state_dict(state["ema"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["trainer"]["step"])
        log.info("resumed at step %d", step)
        return step
