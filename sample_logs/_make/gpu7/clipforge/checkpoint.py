"""Checkpoint manager: step_NNNNNN/{model,optimizer,ema}.pt + trainer_state.json + rng_state_<rank>.pt."""
from __future__ import annotations

import json
import logging
import os
import random
import shutil

import numpy as np
import torch
import torch.distributed as dist

from . import dist as d

log = logging.getLogger("clipforge.checkpoint")


def unwrap(model):
    return model.module if hasattr(model, "module") else model


class CheckpointManager:
    def __init__(self, output_dir: str, keep_last: int = 2, strategy: str = "ddp"):
        self.root = os.path.join(output_dir, "checkpoints")
        self.keep_last = keep_last
        self.strategy = strategy

    # ---------------------------------------------------------------- helpers
    def latest(self) -> str | None:
        marker = os.path.join(self.root, "latest")
        if not os.path.exists(marker):
            return None
        with open(marker) as fh:
            return os.path.join(self.root, fh.read().strip())

    def _model_state(self, model):
        if self.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
            return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}

    # ------------------------------------------------------------------- save
    def save(self, step: int, model, optimizer, scheduler, ema, samples_seen: int) -> None:
        name = f"step_{step:06d}"
        path = os.path.join(self.root, name)
        model_sd = self._model_state(model)
        if d.is_main():
            os.makedirs(path, exist_ok=True)
            torch.save(model_sd, os.path.join(path, "model.pt"))
            if self.strategy != "fsdp2":
                torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                           os.path.join(path, "optimizer.pt"))
            if ema is not None:
                torch.save(ema.state_dict(), os.path.join(path, "ema.pt"))
            with open(os.path.join(path, "trainer_state.json"), "w") as fh:
                json.dump({"step": step, "samples_seen": samples_seen,
                           "world_size": d.world_size()}, fh, indent=2)
        if d.world_size() > 1:
            dist.barrier()
        torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None},
                   os.path.join(path, f"rng_state_{d.rank()}.pt"))
        if d.world_size() > 1:
            dist.barrier()
        if d.is_main():
            with open(os.path.join(self.root, "latest"), "w") as fh:
                fh.write(name)
            self._prune()
            log.info("saved checkpoint %s", path)

    def _prune(self):
        steps = sorted(p for p in os.listdir(self.root) if p.startswith("step_"))
        for old in steps[: -self.keep_last]:
            shutil.rmtree(os.path.join(self.root, old), ignore_errors=True)

    # ------------------------------------------------------------------- load
    def load(self, path: str, model, optimizer, scheduler, ema) -> dict:
        log.info("resuming from %s", path)
        state = torch.load(os.path.join(path, "model.pt"), map_location="cpu", weights_only=True)
        if self.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
            set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
        else:
            unwrap(model).load_state_dict(state, strict=True)
        opt_path = os.path.join(path, "optimizer.pt")
        if os.path.exists(opt_path):
            opt = torch.load(opt_path, map_location="cpu", weights_only=True)
            optimizer.load_state_dict(opt["optimizer"])
            scheduler.load_state_dict(opt["scheduler"])
        if ema is not None and os.path.exists(os.path.join(path, "ema.pt")):
            ema.load_state_dict(torch.load(os.path.join(path, "ema.pt"), map_location="cpu", weights_only=True))
        rng = torch.load(os.path.join(path, f"rng_state_{d.rank()}.pt"), weights_only=False)
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])
        with open(os.path.join(path, "trainer_state.json")) as fh:
            ts = json.load(fh)
        log.info("resumed at step %d (%d samples seen)", ts["step"], ts["samples_seen"])
        return ts
