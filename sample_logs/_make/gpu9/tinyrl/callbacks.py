"""Trainer callbacks: console progress, sample tables, evaluation, checkpointing."""
from __future__ import annotations

import json
import logging
import os
import sys
import time

import torch
import torch.distributed as dist

log = logging.getLogger("tinyrl.callbacks")


class Callback:
    def on_train_begin(self, trainer): ...
    def on_step_end(self, trainer, step: int, metrics: dict, batch: dict): ...
    def on_train_end(self, trainer): ...


class ProgressCallback(Callback):
    """tqdm-like progress lines on rank 0 (one line per log step, no carriage returns)."""

    def on_train_begin(self, trainer):
        self.t0 = time.time()

    def on_step_end(self, trainer, step, metrics, batch):
        if trainer.rank != 0 or step % trainer.cfg.train.log_every:
            return
        n = trainer.cfg.train.max_steps
        el = time.time() - self.t0
        rate = el / max(step, 1)
        frac = step / n
        bar = ("\u2588" * int(frac * 10)).ljust(10)
        post = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        sys.stderr.write(f"grpo: {int(frac * 100):3d}%|{bar}| {step}/{n} [{_fmt(el)}<{_fmt(rate * (n - step))}, "
                         f"{rate:.2f}s/it, {post}]\n")
        sys.stderr.flush()


def _fmt(s):
    s = int(s)
    return f"{s // 60:02d}:{s % 60:02d}"


class SampleTableCallback(Callback):
    """Every N steps each rank appends a few (prompt, completion, reward) rows to outputs/samples/rank<R>.jsonl."""

    def __init__(self, every: int, n: int = 4):
        self.every, self.n = every, n

    def on_step_end(self, trainer, step, metrics, batch):
        if step % self.every:
            return
        d = os.path.join(trainer.cfg.train.output_dir, "samples")
        os.makedirs(d, exist_ok=True)
        rows = []
        for i in range(min(self.n, len(batch["records"]))):
            rec = batch["records"][i]
            rows.append(json.dumps({
                "step": step,
                "uid": rec["uid"],
                "task": rec.get("task", "match"),
                "prompt": rec["prompt"],
                "completion": batch["completions"][i * trainer.cfg.rollout.num_generations],
                "reward": round(float(batch["rewards"][i * trainer.cfg.rollout.num_generations]), 4),
            }))
        with open(os.path.join(d, f"rank{trainer.rank}.jsonl"), "a") as f:
            f.write("\n".join(rows) + "\n")


class EvalCallback(Callback):
    def __init__(self, every: int):
        self.every = every

    def on_step_end(self, trainer, step, metrics, batch):
        if step % self.every:
            return
        r = trainer.evaluate()
        if trainer.rank == 0:
            log.info("eval @ step %d: greedy_reward=%.4f", step, r)


class CheckpointCallback(Callback):
    def __init__(self, every: int):
        self.every = every

    def on_step_end(self, trainer, step, metrics, batch):
        if step % self.every == 0 or step == trainer.cfg.train.max_steps:
            trainer.save(step)
