"""Training callbacks: loss logging, periodic sampling, checkpointing."""
import logging
import os
import time

import torch

from .pngio import to_grid, write_png

log = logging.getLogger("ddpmlite.callbacks")


class Callback:
    def on_train_start(self, tr):
        pass

    def on_step_end(self, tr, step, loss):
        pass

    def on_train_end(self, tr):
        pass


class LossLogger(Callback):
    def __init__(self, every):
        self.every = every
        self.t0 = None
        self.acc = 0.0
        self.n = 0

    def on_train_start(self, tr):
        self.t0 = time.perf_counter()

    def on_step_end(self, tr, step, loss):
        self.acc += loss
        self.n += 1
        if tr.rank == 0 and step % self.every == 0:
            dt = time.perf_counter() - self.t0
            ips = self.n * tr.cfg.data.batch_size * tr.world / dt
            log.info("step %5d/%d | loss %.4f | lr %.2e | scale %s | %.0f img/s", step, tr.cfg.train.max_steps,
                     self.acc / self.n, tr.optimizer.param_groups[0]["lr"],
                     f"{tr.scaler.get_scale():.0f}" if tr.scaler.is_enabled() else "-", ips)
            self.t0, self.acc, self.n = time.perf_counter(), 0.0, 0


class SampleGrid(Callback):
    """Renders EMA samples on one rank (the last by default) so rank 0 is free for checkpointing."""

    def __init__(self, cfg):
        self.cfg = cfg

    def _rank(self, tr):
        return self.cfg.rank % tr.world

    def on_step_end(self, tr, step, loss):
        sc = self.cfg
        if not sc.every or step % sc.every or tr.rank != self._rank(tr):
            return
        if sc.fid:
            from cleanfid import fid  # optional dependency
        else:
            fid = None
        size = sc.image_size or tr.image_size
        log.info("sampling %d images at %dx%d (%d steps, batch %d) with EMA weights", sc.num_images, size, size,
                 sc.steps, sc.batch_size)
        t0 = time.perf_counter()
        model = tr.ema.model
        outs = []
        for start in range(0, sc.num_images, sc.batch_size):
            n = min(sc.batch_size, sc.num_images - start)
            y = (torch.arange(start, start + n, device=tr.device) % tr.num_classes) if tr.num_classes else None
            outs.append(tr.diffusion.sample(model, (n, 3, size, size), y, sc.steps, tr.device).float().cpu())
        x = torch.cat(outs).numpy()
        os.makedirs(sc.out_dir, exist_ok=True)
        path = os.path.join(sc.out_dir, f"step_{step:06d}.png")
        write_png(path, to_grid(x[:64]))
        log.info("wrote %s (%.1fs)", path, time.perf_counter() - t0)
        if fid is not None:
            d = os.path.join(sc.out_dir, f"fid_{step:06d}")
            os.makedirs(d, exist_ok=True)
            for i, im in enumerate(x):
                write_png(os.path.join(d, f"{i:05d}.png"), to_grid(im[None], nrow=1))
            score = fid.compute_fid(d, sc.fid_ref, mode="clean", num_workers=0)
            log.info("FID@%d = %.2f", step, score)


class Checkpointer(Callback):
    def __init__(self, every):
        self.every = every

    def on_step_end(self, tr, step, loss):
        if self.every and step % self.every == 0:
            tr.save(step)
