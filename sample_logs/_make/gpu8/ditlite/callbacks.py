"""Trainer callbacks: progress/metrics logging, preview sampling, best-checkpoint tracking."""
from __future__ import annotations

import logging
import os
import time

import torch

from .logutil import Progress

log = logging.getLogger("ditlite.callbacks")


class Callback:
    def on_train_begin(self, trainer): ...
    def on_step_end(self, trainer, step, logs): ...
    def on_evaluate(self, trainer, step, metrics): ...
    def on_train_end(self, trainer): ...


class ProgressCallback(Callback):
    def on_train_begin(self, trainer):
        self.bar = Progress(trainer.cfg.train.max_steps, "train", enabled=trainer.env.is_main)
        self.t0 = time.time()

    def on_step_end(self, trainer, step, logs):
        if "loss" in logs:
            self.bar.update(step, loss=f"{logs['loss']:.4f}", lr=f"{logs['lr']:.2e}")

    def on_evaluate(self, trainer, step, metrics):
        if trainer.env.is_main:
            log.info("eval @ step %d: %s", step, "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))


class PreviewSampleCallback(Callback):
    """Every `sample.every` steps rank 0 draws a grid of class-conditional samples with the EMA
    weights (optionally decoded to pixels with the VAE); the other ranks wait at a barrier."""

    def __init__(self, scfg):
        self.cfg = scfg
        self.vae = None

    def _decoder(self, device):
        if self.vae is None:
            from diffusers.models import AutoencoderKL  # optional dependency, only for pixel previews
            self.vae = AutoencoderKL.from_pretrained(self.cfg.vae).to(device).eval()
        return self.vae

    def on_step_end(self, trainer, step, logs):
        if not self.cfg.every or step % self.cfg.every:
            return
        env = trainer.env
        if env.is_main:
            c = self.cfg
            lat = c.resolution // trainer.cfg.data.vae_scale
            log.info("preview: %d samples at %dx%d (latent %dx%d), %d DDIM steps, cfg %.1f",
                     c.num, c.resolution, c.resolution, lat, lat, c.steps, c.cfg_scale)
            g = torch.Generator(device=env.device).manual_seed(0)
            y = torch.arange(c.num, device=env.device) % trainer.cfg.model.num_classes
            with trainer.autocast():
                x = trainer.diffusion.ddim_sample(trainer.ema, (c.num, trainer.cfg.model.latent_channels, lat, lat),
                                                  y, steps=c.steps, cfg_scale=c.cfg_scale, generator=g)
            os.makedirs(c.out_dir, exist_ok=True)
            if c.decode:
                vae = self._decoder(env.device)
                with torch.no_grad():
                    x = vae.decode(x / 0.18215).sample
            torch.save(x.float().cpu(), os.path.join(c.out_dir, f"preview_{step:06d}.pt"))
            log.info("preview written to %s", c.out_dir)
        trainer.barrier()


class BestCheckpointCallback(Callback):
    """Keeps `best/` pointing at the checkpoint with the lowest monitored eval metric."""

    def __init__(self, monitor: str):
        self.monitor = monitor
        self.best = float("inf")

    def on_evaluate(self, trainer, step, metrics):
        value = metrics[self.monitor]
        if value < self.best:
            self.best = value
            trainer.save_checkpoint(step, tag="best")
