"""Trainer callbacks: progress bar lines, metric logging, evaluation, checkpointing."""
import json
import logging
import math
import sys
import time

import torch

log = logging.getLogger("lmtrain.callbacks")


class Callback:
    def on_train_start(self, tr): pass
    def on_step_end(self, tr, step, metrics): pass
    def on_train_end(self, tr): pass


def _fmt_t(s):
    s = int(s)
    return f"{s // 60:02d}:{s % 60:02d}"


class ProgressBar(Callback):
    """tqdm-like lines on rank 0, one per `log_every` steps (files, not a tty)."""

    def __init__(self, total, every, width=10):
        self.total, self.every, self.width = total, every, width

    def on_train_start(self, tr):
        self.t0 = time.time()

    def on_step_end(self, tr, step, metrics):
        if tr.rank != 0 or (step % self.every and step != self.total):
            return
        el = time.time() - self.t0
        rate = (step - tr.start_step) / max(el, 1e-6)
        eta = (self.total - step) / max(rate, 1e-6)
        frac = step / self.total
        fill = int(frac * self.width)
        bar = "\u2588" * fill + " " * (self.width - fill)
        sys.stderr.write(f"train: {int(frac * 100):3d}%|{bar}| {step}/{self.total} [{_fmt_t(el)}<{_fmt_t(eta)}, "
                         f"{rate:5.2f}it/s, loss={metrics['loss']:.4f}, lr={metrics['lr']:.2e}]\n")
        sys.stderr.flush()


class MetricLogger(Callback):
    def __init__(self, every):
        self.every = every

    def on_step_end(self, tr, step, metrics):
        if tr.rank == 0 and step % self.every == 0:
            log.info("step %d | loss %.4f | lr %.3e | grad_norm %.3f | tokens %d | %.0f tok/s",
                     step, metrics["loss"], metrics["lr"], metrics["grad_norm"], metrics["tokens"], metrics["tok_s"])


class Evaluator(Callback):
    """Every `every` steps: loss over `batches` val batches per rank, reduced across ranks.
    The last rank appends the result to `jsonl` (like the loss printout of Megatron's last rank)."""

    def __init__(self, every, batches, jsonl=""):
        self.every, self.batches, self.jsonl = every, batches, jsonl

    @torch.no_grad()
    def evaluate(self, tr):
        model = tr.model
        model.eval()
        tot = torch.zeros(2, device=tr.device, dtype=torch.float64)
        for i, batch in enumerate(tr.build_val_loader()):
            if i >= self.batches:
                break
            batch = tr.to_device(batch)
            with tr.autocast():
                _, loss = model(batch["input_ids"], batch["labels"], batch["attn_mask"])
            n = (batch["labels"] != -100).sum()
            tot[0] += loss.double() * n
            tot[1] += n
        tr.all_reduce(tot)
        model.train()
        loss = tot[0] / tot[1]
        return {"eval/loss": loss.item(), "eval/ppl": torch.exp(loss), "eval/tokens": int(tot[1].item())}

    def on_step_end(self, tr, step, metrics):
        if not self.every or step % self.every:
            return
        t0 = time.time()
        m = self.evaluate(tr)
        if tr.rank == 0:
            log.info("eval @ step %d | loss %.4f | ppl %.2f | %d tokens | %.1fs",
                     step, m["eval/loss"], m["eval/ppl"], m["eval/tokens"], time.time() - t0)
        if self.jsonl and tr.rank == tr.world - 1:
            with open(self.jsonl, "a") as f:
                f.write(json.dumps({"step": step, **m}) + "\n")


class Checkpointer(Callback):
    def __init__(self, every):
        self.every = every
        self.last = -1

    def on_step_end(self, tr, step, metrics):
        if self.every and step % self.every == 0:
            tr.save(step)
            self.last = step

    def on_train_end(self, tr):
        if tr.step != self.last:
            tr.save(tr.step)
