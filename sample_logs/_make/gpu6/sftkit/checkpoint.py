"""Checkpoint manager: `step-N/` folders plus a `latest` pointer file.

format=torch: one `state.pt` written by rank 0 (model, optimizer, trainer state).
format=dcp:   torch.distributed.checkpoint, every rank writes its own shard file.
"""
import logging
import os
import shutil
import time

import torch
import torch.distributed as dist

from .distributed import broadcast_object

logger = logging.getLogger(__name__)


class CheckpointManager:
    def __init__(self, cfg, info):
        self.cfg, self.info = cfg, info
        self.dir = cfg.checkpoint.dir
        self.format = cfg.checkpoint.format
        os.makedirs(self.dir, exist_ok=True)

    def _step_dir(self, step):
        return os.path.join(self.dir, f"step-{step}")

    def latest_step(self):
        p = os.path.join(self.dir, "latest")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return int(f.read().strip().split("-")[-1])

    def resolve_resume(self):
        spec = self.cfg.checkpoint.resume_from
        if not spec:
            return None
        step = None
        if self.info.is_main:
            step = self.latest_step() if spec == "latest" else int(spec.split("-")[-1])
        return broadcast_object(step, self.info)

    # ------------------------------------------------------------------ save
    def save(self, step, model, optimizer, trainer_state):
        t0 = time.time()
        path = self._step_dir(step)
        if self.format == "dcp":
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict
            msd, osd = get_state_dict(model, optimizer)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=path,
                     process_group=self.info.cpu_group)
            if self.info.is_main:
                torch.save(dict(trainer_state), os.path.join(path, "trainer_state.pt"))
        else:
            if self.info.is_main:
                os.makedirs(path, exist_ok=True)
                module = getattr(model, "module", model)
                state = {
                    "model": module.state_dict(),
                    "optim": optimizer.state_dict(),
                    "trainer_state": dict(trainer_state),
                    "config": self.cfg,
                    "rng": torch.get_rng_state(),
                }
                torch.save(state, os.path.join(path, "state.pt"))
            if dist.is_initialized():
                dist.barrier(group=self.info.cpu_group)
        if self.info.is_main:
            with open(os.path.join(self.dir, "latest"), "w") as f:
                f.write(f"step-{step}\n")
            self._prune()
            logger.info("Saved checkpoint %s in %.2fs", path, time.time() - t0)

    def _prune(self):
        steps = sorted(int(d.split("-")[1]) for d in os.listdir(self.dir) if d.startswith("step-"))
        for s in steps[: -self.cfg.checkpoint.keep]:
            shutil.rmtree(self._step_dir(s), ignore_errors=True)

    # ------------------------------------------------------------------ load
    def load(self, step, model, optimizer):
        path = self._step_dir(step)
        logger.info("Resuming from %s", path)
        if self.format == "dcp":
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd, "optim": osd}
            dcp.load(state, checkpoint_id=path, process_group=self.info.cpu_group)
            set_state_dict(model, optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
            ts = torch.load(os.path.join(path, "trainer_state.pt")) if self.info.is_main else None
            return broadcast_object(ts, self.info)
        state = torch.load(os.path.join(path, "state.pt"), map_location="cpu")
        module = getattr(model, "module", model)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        return state["trainer_state"]
