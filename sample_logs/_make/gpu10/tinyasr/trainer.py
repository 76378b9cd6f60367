"""Trainer with callbacks, AMP, grad accumulation, DDP, checkpoint manager."""
import json
import logging
import math
import os
import shutil
import sys
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist

log = logging.getLogger("tinyasr.trainer")


class Callback:
    def on_train_begin(self, tr): pass
    def on_step_end(self, tr, logs): pass
    def on_eval(self, tr): pass
    def on_train_end(self, tr): pass


class ProgressCallback(Callback):
    """tqdm-like progress lines, rank 0 only."""

    def on_train_begin(self, tr):
        self.t0 = time.time()

    def on_step_end(self, tr, logs):
        if tr.rank != 0 or tr.step % tr.cfg.log_every:
            return
        n, N = tr.step, tr.cfg.max_steps
        el = time.time() - self.t0
        rate = n / max(el, 1e-9)
        bar = "#" * int(20 * n / N)
        eta = (N - n) / max(rate, 1e-9)
        print(f"train: {100 * n // N:3d}%|{bar:<20}| {n}/{N} [{int(el) // 60:02d}:{int(el) % 60:02d}<{int(eta) // 60:02d}:{int(eta) % 60:02d}, "
              f"{rate:.2f}it/s, loss={logs['loss']:.3f}, ctc={logs['ctc']:.3f}, lr={logs['lr']:.2e}]", flush=True)


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            cur = d[j]
            d[j] = min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
            prev = cur
    return d[len(b)]


class WerEvalCallback(Callback):
    def __init__(self, loader):
        self.loader = loader

    def on_eval(self, tr):
        model = tr.model.module if hasattr(tr.model, "module") else tr.model
        model.eval()
        tot_err = tot_words = 0.0
        utt_wers = []
        with torch.no_grad(), tr.autocast():
            for batch in self.loader:
                feats = batch["feats"].to(tr.device)
                enc, lens, _ = model.encode(feats, batch["feat_lens"].to(tr.device))
                lp = torch.log_softmax(model.ctc_head(enc).float(), -1).transpose(0, 1)
                hyps = model.greedy(lp, lens)
                for h, ref in zip(hyps, batch["texts"]):
                    ref_w = tr.tok.normalize(ref).split()
                    e = edit_distance(tr.tok.decode(h).split(), ref_w)
                    utt_wers.append(e / len(ref_w))
                    tot_err += e
                    tot_words += len(ref_w)
        t = torch.tensor([tot_err, tot_words, float(len(utt_wers))], device=tr.device, dtype=torch.float64)
        if tr.world > 1:
            dist.all_reduce(t)
        wer = (t[0] / t[1].clamp(min=1)).item()
        if tr.rank == 0:
            log.info("eval @ step %d: WER %.2f%% over %d utterances", tr.step, 100 * wer, int(t[2]))
        model.train()
        tr.metrics["wer"] = wer


class CheckpointManager(Callback):
    def __init__(self, directory, every, keep_last=3):
        self.dir = directory
        self.every = every
        self.keep = keep_last

    def path(self, step):
        return os.path.join(self.dir, f"step_{step:06d}")

    def on_step_end(self, tr, logs):
        if self.every and tr.step % self.every == 0:
            self.save(tr)

    def save(self, tr):
        if tr.rank == 0:
            p = self.path(tr.step)
            os.makedirs(p, exist_ok=True)
            model = tr.model.module if hasattr(tr.model, "module") else tr.model
            torch.save({"model": model.state_dict(), "optimizer": tr.opt.state_dict(),
                        "scheduler": tr.sched.state_dict(), "step": tr.step}, os.path.join(p, "state.pt"))
            with open(os.path.join(p, "meta.json"), "w") as f:
                json.dump({"step": tr.step, "metrics": tr.metrics, "vocab_size": model.vocab_size}, f)
            with open(os.path.join(self.dir, "latest"), "w") as f:
                f.write(os.path.basename(p))
            log.info("saved checkpoint %s", p)
            steps = sorted(d for d in os.listdir(self.dir) if d.startswith("step_"))
            for old in steps[: -self.keep]:
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)
        if tr.world > 1:
            dist.barrier()

    def latest(self):
        f = os.path.join(self.dir, "latest")
        if not os.path.exists(f):
            return None
        return os.path.join(self.dir, open(f).read().strip())

    def load(self, tr, path):
        log.info("resuming from %s", path)
        state = torch.load(os.path.join(path, "state.pt"), map_location="cpu", weights_only=False)
        model = tr.model.module if hasattr(tr.model, "module") else tr.model
        model.load_state_dict(state["model"])
        tr.opt.load_state_dict(state["optimizer"])
        tr.sched.load_state_dict(state["scheduler"])
        tr.step = state["step"]


class Trainer:
    def __init__(self, cfg, model, tok, train_loader, device, rank, world, callbacks, specaug=None):
        self.cfg = cfg
        self.model = model
        self.tok = tok
        self.loader = train_loader
        self.device = device
        self.rank = rank
        self.world = world
        self.callbacks = callbacks
        self.specaug = specaug
        self.step = 0
        self.metrics = {}
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
        warm = cfg.warmup_steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min((s + 1) / warm, (warm / (s + 1)) ** 0.5))
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[cfg.precision]
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")

    def autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def train(self):
        cfg = self.cfg
        for cb in self.callbacks:
            cb.on_train_begin(self)
        epoch = 0
        self.model.train()
        while self.step < cfg.max_steps:
            self.loader.batch_sampler.set_epoch(epoch)
            accum = 0
            for batch in self.loader:
                feats = batch["feats"].to(self.device, non_blocking=True)
                if self.specaug is not None:
                    feats = self.specaug(feats)
                sync = (accum + 1) % cfg.grad_accum == 0
                ctx = self.model.no_sync() if (not sync and hasattr(self.model, "no_sync")) else nullcontext()
                with ctx:
                    with self.autocast():
                        out = self.model(feats, batch["feat_lens"].to(self.device), batch["ys"].to(self.device),
                                         batch["ys_lens"].to(self.device))
                    self.scaler.scale(out["loss"] / cfg.grad_accum).backward()
                accum += 1
                if not sync:
                    continue
                self.scaler.unscale_(self.opt)
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip)
                self.scaler.step(self.opt)
                self.scaler.update()
                self.opt.zero_grad(set_to_none=True)
                self.sched.step()
                self.step += 1
                logs = {"loss": out["loss"].item(), "ctc": out["ctc_loss"].item(), "lr": self.sched.get_last_lr()[0],
                        "grad_norm": gn.item()}
                for cb in self.callbacks:
                    cb.on_step_end(self, logs)
                if cfg.eval_every and self.step % cfg.eval_every == 0:
                    for cb in self.callbacks:
                        cb.on_eval(self)
                if self.step >= cfg.max_steps:
                    break
            epoch += 1
        for cb in self.callbacks:
            cb.on_train_end(self)
