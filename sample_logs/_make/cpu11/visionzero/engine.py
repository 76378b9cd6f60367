"""Trainer with hooks: DDP + ZeroRedundancyOptimizer (ZeRO-1), mixup/cutmix, EMA, BN stat sync, checkpoints."""
from __future__ import annotations

import copy
import csv
import logging
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from . import dist as du
from .data import ContiguousDistributedSampler, MixupCutmixCollate, ShardedImageDataset, worker_init
from .logutil import Progress
from .model import build_model

log = logging.getLogger("visionzero.engine")


# --------------------------------------------------------------------------- hooks
class Hook:
    def before_train(self, tr): pass
    def after_step(self, tr): pass
    def after_epoch(self, tr): pass
    def after_train(self, tr): pass


class EMAHook(Hook):
    def __init__(self, decay):
        self.decay = decay

    def before_train(self, tr):
        if tr.ema is None:
            tr.ema = copy.deepcopy(tr.model.module).eval()
            for p in tr.ema.parameters():
                p.requires_grad_(False)

    @torch.no_grad()
    def after_step(self, tr):
        for e, p in zip(tr.ema.state_dict().values(), tr.model.module.state_dict().values()):
            if e.dtype.is_floating_point:
                e.lerp_(p, 1 - self.decay)
            else:
                e.copy_(p)


class MetricsCSVHook(Hook):
    """Written by the last rank so that rank 0's console logging is not slowed down."""

    def __init__(self, path):
        self.path = path

    def before_train(self, tr):
        if du.rank() != du.world() - 1:
            self.f = None
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.f = open(self.path, "w", newline="")
        self.w = csv.writer(self.f)
        self.w.writerow(["step", "epoch", "loss", "lr", "grad_norm", "img_per_s"])

    def after_step(self, tr):
        if self.f is None:
            return
        self.w.writerow([tr.step, tr.epoch, f"{tr.last_loss:.5f}", f"{tr.lr:.6f}",
                         f"{tr.grad_norm:.4f}", f"{tr.img_per_s:.1f}"])
        self.f.flush()

    def after_train(self, tr):
        if self.f is not None:
            self.f.close()


class PreviewHook(Hook):
    """Rank 0 writes a grid of the first augmented batch so you can eyeball the augmentation."""

    def __init__(self, out_dir):
        self.out_dir = out_dir

    def before_train(self, tr):
        if not du.is_main():
            return
        from torchvision.utils import save_image
        batch = next(iter(tr.train_loader))
        os.makedirs(self.out_dir, exist_ok=True)
        save_image(batch["image"][:16] * 0.25 + 0.5, os.path.join(self.out_dir, "aug_preview.png"), nrow=4)


class EvalHook(Hook):
    def after_epoch(self, tr):
        tr.sync_bn_stats()
        acc = tr.evaluate(tr.model.module)
        log.info("epoch %d eval top1=%.2f%%", tr.epoch, acc * 100)
        if tr.ema is not None:
            log.info("epoch %d eval top1(ema)=%.2f%%", tr.epoch, tr.evaluate(tr.ema) * 100)


class CheckpointHook(Hook):
    def __init__(self, cfg):
        self.cfg = cfg
        self.last = time.time()

    def after_step(self, tr):
        if self.cfg.every_minutes > 0 and time.time() - self.last > self.cfg.every_minutes * 60:
            tr.save_checkpoint()
            self.last = time.time()

    def after_epoch(self, tr):
        if self.cfg.every_epochs > 0 and (tr.epoch + 1) % self.cfg.every_epochs == 0:
            tr.save_checkpoint()
            self.last = time.time()


# --------------------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rank, self.world = du.rank(), du.world()
        torch.manual_seed(cfg.train.seed)
        np.random.seed(cfg.train.seed + self.rank)
        self.device = torch.device("cpu")
        self.step, self.epoch, self.start_epoch = 0, 0, 0
        self.last_loss, self.lr, self.grad_norm, self.img_per_s = float("nan"), 0.0, None, 0.0
        self.ema = None

        self._build_data()
        model = build_model(cfg.model)
        n = sum(p.numel() for p in model.parameters())
        log.info("model %s: %.2fM params", cfg.model.arch, n / 1e6)
        self.model = DDP(model)
        self.optimizer = ZeroRedundancyOptimizer(self.model.parameters(), optimizer_class=torch.optim.SGD,
                                                 lr=cfg.optim.lr, momentum=cfg.optim.momentum,
                                                 weight_decay=cfg.optim.weight_decay)
        self.scaler = torch.cuda.amp.GradScaler(enabled=cfg.optim.amp)
        self.hooks = []
        if cfg.train.ema_decay > 0:
            self.hooks.append(EMAHook(cfg.train.ema_decay))
        if cfg.log.preview_grid:
            self.hooks.append(PreviewHook(cfg.log.out_dir))
        if cfg.log.metrics_csv:
            self.hooks.append(MetricsCSVHook(os.path.join(cfg.log.out_dir, "metrics.csv")))
        self.hooks += [EvalHook(), CheckpointHook(cfg.ckpt)]
        if cfg.ckpt.resume:
            self.load_checkpoint(cfg.ckpt.resume)

    def _build_data(self):
        c, a = self.cfg.data, self.cfg.aug
        self.train_set = ShardedImageDataset(c.root, "train")
        self.val_set = ShardedImageDataset(c.root, "val")
        self.sampler = ContiguousDistributedSampler(len(self.train_set), self.rank, self.world, seed=self.cfg.train.seed)
        collate = MixupCutmixCollate(self.cfg.model.num_classes, a.mixup_alpha, a.cutmix_alpha, a.prob,
                                     a.switch_prob, a.label_smoothing)
        kw = dict(num_workers=c.num_workers, prefetch_factor=c.prefetch_factor if c.num_workers > 0 else None,
                  persistent_workers=False)
        self.train_loader = DataLoader(self.train_set, batch_size=c.batch_size, sampler=self.sampler,
                                       collate_fn=collate, drop_last=True,
                                       worker_init_fn=worker_init(self.cfg.train.seed * 1000 + self.rank * 10), **kw)
        vs = ContiguousDistributedSampler(len(self.val_set), self.rank, self.world, shuffle=False)
        self.val_loader = DataLoader(self.val_set, batch_size=c.batch_size, sampler=vs,
                                     collate_fn=MixupCutmixCollate(0, 0, 0, 0, 0, 0, train=False), num_workers=0)
        log.info("data: %d train / %d val images, %d steps/epoch/rank", len(self.train_set), len(self.val_set),
                 len(self.train_loader))

    # ---------------------------------------------------------------- schedule
    def lr_at(self, step, total):
        w = self.cfg.optim.warmup_steps
        if step < w:
            return self.cfg.optim.lr * (step + 1) / w
        return 0.5 * self.cfg.optim.lr * (1 + math.cos(math.pi * (step - w) / max(1, total - w)))

    # ---------------------------------------------------------------- train
    def train(self):
        for h in self.hooks:
            h.before_train(self)
        steps_per_epoch = len(self.train_loader)
        total = steps_per_epoch * self.cfg.train.epochs
        log.info("start training: epochs=%d, global batch=%d, world=%d", self.cfg.train.epochs,
                 self.cfg.data.batch_size * self.world, self.world)
        for epoch in range(self.start_epoch, self.cfg.train.epochs):
            self.epoch = epoch
            self.sampler.set_epoch(epoch)
            self.model.train()
            prog = Progress(steps_per_epoch, f"epoch {epoch}", every=self.cfg.log.every, enabled=du.is_main())
            t_last = time.time()
            for batch in self.train_loader:
                self.lr = self.lr_at(self.step, total)
                for g in self.optimizer.param_groups:
                    g["lr"] = self.lr
                out = self.model(batch["image"])
                loss = torch.sum(-batch["target"] * F.log_softmax(out, dim=-1), dim=-1).mean()
                if self.cfg.train.skip_nonfinite and not torch.isfinite(loss):
                    log.warning("non-finite loss (%s) at step %d, skipping batch", loss.item(), self.step)
                    self.optimizer.zero_grad(set_to_none=True)
                    continue
                self.scaler.scale(loss).backward()
                if self.cfg.optim.clip_grad > 0:
                    self.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                                    self.cfg.optim.clip_grad).item()
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad(set_to_none=True)
                self.last_loss = loss.item()
                now = time.time()
                self.img_per_s = batch["image"].shape[0] * self.world / max(now - t_last, 1e-6)
                t_last = now
                self.step += 1
                for h in self.hooks:
                    h.after_step(self)
                gn = f"{self.grad_norm:.3f}" if self.grad_norm is not None else "n/a"
                prog.update(loss=f"{self.last_loss:.4f}", lr=f"{self.lr:.4f}", gnorm=gn)
                if 0 < self.cfg.train.max_steps <= self.step:
                    break
            for h in self.hooks:
                h.after_epoch(self)
            if 0 < self.cfg.train.max_steps <= self.step:
                break
        for h in self.hooks:
            h.after_train(self)
        log.info("training done at step %d", self.step)

    @torch.no_grad()
    def sync_bn_stats(self):
        """SyncBatchNorm-free: average BN running stats across ranks before evaluating."""
        for m in self.model.module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                du.all_reduce_mean(m.running_mean)
                du.all_reduce_mean(m.running_var)

    @torch.no_grad()
    def evaluate(self, model):
        model.eval()
        correct = torch.zeros(2)
        for batch in self.val_loader:
            pred = model(batch["image"]).argmax(-1)
            correct[0] += (pred == batch["label"]).sum()
            correct[1] += batch["label"].numel()
        dist.all_reduce(correct)
        model.train()
        return (correct[0] / correct[1].clamp(min=1)).item()

    # ---------------------------------------------------------------- checkpoints
    def save_checkpoint(self):
        path = os.path.join(self.cfg.ckpt.dir, f"step_{self.step:06d}.pt")
        state = {"model": self.model.module.state_dict(), "step": self.step, "epoch": self.epoch + 1,
                 "config": self.cfg.to_dict()}
        if self.ema is not None:
            state["ema"] = self.ema.state_dict()
        if du.is_main():
            log.info("saving checkpoint %s", path)
            if self.cfg.ckpt.save_optimizer:
                self.optimizer.consolidate_state_dict(to=0)
                state["optimizer"] = self.optimizer.state_dict()
            os.makedirs(self.cfg.ckpt.dir, exist_ok=True)
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
            with open(os.path.join(self.cfg.ckpt.dir, "latest"), "w") as f:
                f.write(os.path.basename(path))
        du.barrier()

    def load_checkpoint(self, path):
        if os.path.isdir(path):
            with open(os.path.join(path, "latest")) as f:
                path = os.path.join(path, f.read().strip())
        log.info("resuming from %s", path)
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.model.module.load_state_dict(state["model"])
        if self.cfg.train.ema_decay > 0:
            self.ema = copy.deepcopy(self.model.module).eval()
            self.ema.load_state_dict(state["ema"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.start_epoch = state["step"], state["epoch"]
        log.info("resumed at step %d (epoch %d)", self.step, self.start_epoch)
