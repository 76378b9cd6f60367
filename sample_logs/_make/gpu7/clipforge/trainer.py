"""Trainer: AMP, grad accumulation, DDP / FSDP2, EMA, callbacks, resume."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import dist as d
from .callbacks import (CheckpointCallback, EMACallback, MetricsLogger, ProgressBar,
                        RetrievalEval)
from .checkpoint import CheckpointManager
from .data import build_train_loader
from .loss import ClipLoss
from .model import CLIP, count_params

log = logging.getLogger("clipforge.trainer")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelEMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = {k: v.detach().clone().float() for k, v in model.state_dict().items()
                       if v.dtype.is_floating_point}

    @torch.no_grad()
    def update(self, model):
        sd = model.state_dict()
        for k, v in self.shadow.items():
            v.lerp_(sd[k].float(), 1.0 - self.decay)

    def state_dict(self):
        return {k: v.cpu() for k, v in self.shadow.items()}

    def load_state_dict(self, sd):
        for k, v in sd.items():
            self.shadow[k].copy_(v)


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


class Trainer:
    def __init__(self, cfg, device):
        self.cfg = cfg
        self.device = device
        self.step = 0
        self.samples_seen = 0
        self.param_dtype = DTYPES[cfg.model.dtype]
        torch.manual_seed(cfg.train.seed)

        model = CLIP(cfg.model)
        if cfg.train.freeze_text_tower:
            for p in model.text.parameters():
                p.requires_grad_(False)
        model.to(device=device, dtype=self.param_dtype)
        total, trainable = count_params(model)
        log.info("model: CLIP ViT-%d/%d, %.2fM params (%.2fM trainable), dtype %s",
                 cfg.model.image_size, cfg.model.patch_size, total / 1e6, trainable / 1e6, self.param_dtype)
        self.raw_model = model
        if cfg.train.compile:
            log.info("compiling model with backend=%s", cfg.train.compile_backend)
            model = torch.compile(model, backend=cfg.train.compile_backend)
        self.ckpt_model = model
        if d.world_size() > 1:
            if cfg.dist.strategy == "fsdp2":
                from torch.distributed.device_mesh import init_device_mesh
                mesh = init_device_mesh(device.type, (d.world_size(),))
                fully_shard = _fully_shard()
                for blk in list(self.raw_model.visual.blocks) + list(self.raw_model.text.blocks):
                    fully_shard(blk, mesh=mesh)
                fully_shard(self.raw_model, mesh=mesh)
                self.ckpt_model = self.raw_model
            else:
                model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                            find_unused_parameters=cfg.dist.find_unused_parameters)
                self.ckpt_model = model
        self.model = model

        self.loss_fn = ClipLoss(cfg, cfg.model.embed_dim, device)
        self.optimizer = self._build_optimizer()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_lambda)
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.train.precision)
        self.amp_dtype = amp_dtype
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.train.precision == "fp16")
        self.ema = ModelEMA(self.raw_model, cfg.train.ema_decay) if cfg.train.ema_decay > 0 else None
        self.ckpt = CheckpointManager(cfg.train.output_dir, strategy=cfg.dist.strategy)

        self.callbacks = [ProgressBar(), MetricsLogger()]
        if self.ema is not None:
            self.callbacks.append(EMACallback(cfg.train.ema_decay))
        if cfg.train.eval_every > 0:
            self.callbacks.append(RetrievalEval())
        if cfg.train.save_every > 0:
            self.callbacks.append(CheckpointCallback())

        if cfg.train.resume:
            path = self.ckpt.latest() if cfg.train.resume == "auto" else cfg.train.resume
            if path is None:
                log.info("no checkpoint found under %s, starting from scratch", self.ckpt.root)
            else:
                ts = self.ckpt.load(path, self.ckpt_model, self.optimizer, self.scheduler, self.ema)
                self.step, self.samples_seen = ts["step"], ts["samples_seen"]
        per_rank = self.samples_seen // max(d.world_size(), 1)
        self.loader = build_train_loader(cfg, d.rank(), d.world_size(), start_sample=per_rank)

    # ---------------------------------------------------------------- set-up
    def _build_optimizer(self):
        decay, no_decay = [], []
        for n, p in self.raw_model.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if p.ndim < 2 or "embedding" in n or "logit_scale" in n else decay).append(p)
        o = self.cfg.optim
        groups = [{"params": decay, "weight_decay": o.wd}, {"params": no_decay, "weight_decay": 0.0}]
        log.info("optimizer: AdamW, %d tensors with weight decay, %d without", len(decay), len(no_decay))
        return torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas), eps=o.eps,
                                 fused=o.fused or None)

    def _lr_lambda(self, step):
        o, total = self.cfg.optim, self.cfg.train.max_steps
        if step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        if o.schedule == "constant":
            return 1.0
        prog = (step - o.warmup_steps) / max(1, total - o.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(prog, 1.0)))

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def save_checkpoint(self, step):
        self.ckpt.save(step, self.ckpt_model, self.optimizer, self.scheduler, self.ema, self.samples_seen)

    # ------------------------------------------------------------------ train
    def _micro_step(self, batch, sync: bool):
        images = batch["images"].to(self.device, self.param_dtype, non_blocking=True)
        tokens = batch["tokens"].to(self.device, non_blocking=True)
        labels = batch["labels"].to(self.device, non_blocking=True)
        ctx = contextlib.nullcontext()
        if not sync and isinstance(self.model, DDP):
            ctx = self.model.no_sync()
        with ctx:
            with self.autocast():
                out = self.model(images, tokens)
                losses = self.loss_fn(out, labels if self.cfg.model.num_classes > 0 else None)
            self.scaler.scale(losses["loss"] / self.cfg.train.grad_accum).backward()
        return losses

    def train(self):
        cfg = self.cfg
        for cb in self.callbacks:
            cb.on_train_start(self)
        log.info("***** training: %d steps, micro batch %d/rank, grad accum %d, world %d, precision %s *****",
                 cfg.train.max_steps, cfg.data.batch_size, cfg.train.grad_accum, d.world_size(),
                 cfg.train.precision)
        it = iter(self.loader)
        self.model.train()
        while self.step < cfg.train.max_steps:
            for micro in range(cfg.train.grad_accum):
                batch = next(it)
                losses = self._micro_step(batch, sync=micro == cfg.train.grad_accum - 1)
            self.scaler.unscale_(self.optimizer)
            gnorm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), cfg.optim.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            self.step += 1
            self.samples_seen += cfg.data.batch_size * cfg.train.grad_accum * d.world_size()
            metrics = {k: d.all_reduce_mean(v.detach().float()).item() for k, v in losses.items()}
            metrics["grad_norm"] = float(gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm)
            for cb in self.callbacks:
                cb.on_step_end(self, self.step, metrics)
        for cb in self.callbacks:
            cb.on_train_end(self)
        log.info("training finished: %d steps, %d samples", self.step, self.samples_seen)
