"""Trainer callbacks: progress bar, metrics logging, EMA, retrieval eval, checkpointing."""
from __future__ import annotations

import logging
import sys
import time

import torch

from . import dist as d
from .data import build_eval_loader

log = logging.getLogger("clipforge.callbacks")


class Callback:
    def on_train_start(self, trainer): ...
    def on_step_end(self, trainer, step: int, metrics: dict): ...
    def on_train_end(self, trainer): ...


def _fmt_time(s: float) -> str:
    s = int(s)
    return f"{s // 60:02d}:{s % 60:02d}"


class ProgressBar(Callback):
    """tqdm-like progress line on rank 0 (carriage returns, like tqdm writing to a file)."""

    def on_train_start(self, trainer):
        self.t0 = time.time()
        self.start = trainer.step
        self.enabled = d.is_main()

    def on_step_end(self, trainer, step, metrics):
        if not self.enabled:
            return
        total = trainer.cfg.train.max_steps
        done = step - self.start
        el = time.time() - self.t0
        rate = done / el if el > 0 else 0.0
        rem = (total - step) / rate if rate > 0 else 0.0
        frac = step / total
        filled = int(frac * 20)
        bar = "\u2588" * filled + " " * (20 - filled)
        sys.stderr.write(f"\rtrain: {int(frac * 100):3d}%|{bar}| {step}/{total} "
                         f"[{_fmt_time(el)}<{_fmt_time(rem)}, {rate:.2f}it/s, loss={metrics['loss']:.4f}]")
        if step % trainer.cfg.train.log_every == 0 or step == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class MetricsLogger(Callback):
    def on_train_start(self, trainer):
        self.last = time.time()

    def on_step_end(self, trainer, step, metrics):
        if step % trainer.cfg.train.log_every:
            return
        now = time.time()
        dt = (now - self.last) / trainer.cfg.train.log_every
        self.last = now
        gbs = trainer.cfg.data.batch_size * trainer.cfg.train.grad_accum * d.world_size()
        parts = " | ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        log.info("step %d/%d | %s | lr %.3e | %.0f samples/s | mem %.2f GiB", step,
                 trainer.cfg.train.max_steps, parts, trainer.scheduler.get_last_lr()[0], gbs / dt,
                 torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0)


class EMACallback(Callback):
    def __init__(self, decay: float):
        self.decay = decay

    def on_step_end(self, trainer, step, metrics):
        trainer.ema.update(trainer.raw_model)


class RetrievalEval(Callback):
    """Zero-shot image<->text retrieval on the eval shards.

    Runs on the LAST rank so rank 0 (which writes checkpoints) is not slowed down.
    """

    def on_step_end(self, trainer, step, metrics):
        if step % trainer.cfg.train.eval_every or not d.is_last():
            return
        t0 = time.time()
        model = trainer.raw_model
        model.eval()
        imgs, txts = [], []
        with torch.no_grad(), trainer.autocast():
            for batch in build_eval_loader(trainer.cfg):
                imgs.append(model.encode_image(batch["images"].to(trainer.device, trainer.param_dtype)).float())
                txts.append(model.encode_text(batch["tokens"].to(trainer.device)).float())
        model.train()
        img, txt = torch.cat(imgs), torch.cat(txts)
        sim = img @ txt.T
        gt = torch.arange(sim.shape[0], device=sim.device)
        res = {}
        for k in trainer.cfg.train.recall_at:
            i2t = (sim.topk(k, dim=1).indices == gt[:, None]).any(1).float().mean().item()
            t2i = (sim.T.topk(k, dim=1).indices == gt[:, None]).any(1).float().mean().item()
            res[f"i2t@{k}"], res[f"t2i@{k}"] = i2t, t2i
        log.warning("[eval] step %d | n=%d | %s | %.1fs", step, sim.shape[0],
                    " ".join(f"{k}={v:.3f}" for k, v in res.items()), time.time() - t0)


class CheckpointCallback(Callback):
    def on_step_end(self, trainer, step, metrics):
        if step % trainer.cfg.train.save_every == 0:
            trainer.save_checkpoint(step)
