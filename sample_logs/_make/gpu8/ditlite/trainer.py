"""Trainer: AMP, gradient accumulation, EMA, evaluation (val loss + Frechet distance of latents)."""
from __future__ import annotations

import contextlib
import copy
import logging
import math
import time

import torch
import torch.distributed as dist

from .checkpoint import CheckpointManager
from .data import build_loader
from .diffusion import GaussianDiffusion
from .dist import all_reduce_mean, barrier, unwrap, wrap_model
from .logutil import Progress
from .model import DiT

log = logging.getLogger("ditlite.trainer")


def frechet_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = torch.cov(a.T), torch.cov(b.T)
    ev = torch.linalg.eigvals(s1 @ s2)
    tr_sqrt = ev.sqrt().real.sum()
    return float((mu1 - mu2).pow(2).sum() + s1.trace() + s2.trace() - 2 * tr_sqrt)


def latent_features(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.adaptive_avg_pool2d(x.float(), 4).flatten(1)


class Trainer:
    def __init__(self, cfg, env, callbacks=()):
        self.cfg, self.env = cfg, env
        self.callbacks = list(callbacks)
        torch.manual_seed(cfg.train.seed + env.rank)
        model = DiT(cfg.model).to(env.device)
        n_params = sum(p.numel() for p in model.parameters())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        log.info("DiT: depth=%d hidden=%d heads=%d patch=%d | %.2fM params (%.2fM trainable)",
                 cfg.model.depth, cfg.model.hidden_size, cfg.model.num_heads, cfg.model.patch_size,
                 n_params / 1e6, n_train / 1e6)
        self.ema = copy.deepcopy(model).eval().requires_grad_(False)
        self.model = wrap_model(model, cfg.train, env, cfg.dist.find_unused_parameters)
        if cfg.train.compile:
            self.model = torch.compile(self.model)
        self.diffusion = GaussianDiffusion(cfg.diffusion, env.device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay,
                                     betas=(0.9, 0.999))
        warm = max(cfg.train.warmup_steps, 1)
        total = cfg.train.max_steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
        self.ckpt = CheckpointManager(cfg.checkpoint, env)
        self.train_loader = build_loader(cfg.data, cfg.train.batch_size, env.rank, env.world, cfg.train.seed)
        self.val_loader = build_loader(cfg.data, cfg.train.batch_size, env.rank, env.world, cfg.train.seed,
                                       train=False) if cfg.eval.every else None
        self.step = 0
        self.seen_keys = []

    # -- helpers ---------------------------------------------------------------------------
    def autocast(self):
        p = self.cfg.train.precision
        if p == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if p == "bf16" else torch.float16
        return torch.autocast(self.env.device.type, dtype=dtype)

    def barrier(self):
        barrier(self.env)

    def save_checkpoint(self, step, tag=None):
        extra = {"run": self.cfg.run_name}
        if self.cfg.checkpoint.exact_resume:
            extra["seen"] = [k.tolist() for k in self.seen_keys]
        self.ckpt.save(step, unwrap(self.model), self.ema, self.opt, extra, name=tag)

    @torch.no_grad()
    def update_ema(self):
        d = self.cfg.train.ema_decay
        for pe, pm in zip(self.ema.parameters(), unwrap(self.model).parameters()):
            pe.lerp_(pm.detach().to(pe.dtype), 1 - d)

    def _batches(self):
        epoch = 0
        while True:
            self.train_loader.sampler.set_epoch(epoch) if hasattr(self.train_loader.sampler, "set_epoch") else None
            for b in self.train_loader:
                yield b
            epoch += 1

    # -- eval ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self):
        env, ec = self.env, self.cfg.eval
        self.model.eval()
        tot = torch.zeros(2, device=env.device)
        feats = []
        for i, b in enumerate(self.val_loader):
            if i >= ec.batches:
                break
            x = b["latent"].to(env.device, non_blocking=True)
            y = b["label"].to(env.device, non_blocking=True)
            with self.autocast():
                loss = self.diffusion.training_loss(self.model, x, y, env.rank, env.world)
            tot += torch.stack([loss.detach().float() * x.shape[0], torch.tensor(float(x.shape[0]), device=env.device)])
            feats.append(latent_features(x).cpu())
        if env.world > 1:
            dist.all_reduce(tot)
        metrics = {"val_loss": (tot[0] / tot[1]).item()}
        if ec.fd_num_samples and env.is_main:
            # Frechet distance of generated vs. real latents; computed on rank 0 only
            metrics["fd"] = self._frechet(torch.cat(feats))
        self.barrier()
        self.model.train()
        return metrics

    def _frechet(self, real_feats):
        ec, env = self.cfg.eval, self.env
        n, bs = ec.fd_num_samples, ec.fd_batch_size
        lat = self.cfg.data.image_size // self.cfg.data.vae_scale
        shape = (bs, self.cfg.model.latent_channels, lat, lat)
        nb = (n + bs - 1) // bs
        log.info("fd: generating %d samples (%d DDIM steps, cfg %.1f, batch %d) with EMA weights", n, ec.fd_steps,
                 ec.cfg_scale, bs)
        bar = Progress(nb, "fd-sampling", min_interval=5.0)
        fake = []
        g = torch.Generator(device=env.device).manual_seed(1)
        for i in range(nb):
            y = torch.randint(0, self.cfg.model.num_classes, (bs,), device=env.device, generator=g)
            with self.autocast():
                x = self.diffusion.ddim_sample(self.ema, shape, y, steps=ec.fd_steps, cfg_scale=ec.cfg_scale,
                                               generator=g)
            fake.append(latent_features(x).cpu())
            bar.update(i + 1)
        return frechet_distance(torch.cat(fake)[:n], real_feats)

    # -- train -----------------------------------------------------------------------------
    def fit(self):
        cfg, env = self.cfg, self.env
        start = self.ckpt.load(unwrap(self.model), self.ema, self.opt)
        for _ in range(start):
            self.sched.step()
        for cb in self.callbacks:
            cb.on_train_begin(self)
        log.info("***** training: steps %d -> %d, batch %d x %d ranks x %d accum, precision %s, %s *****",
                 start, cfg.train.max_steps, cfg.train.batch_size, env.world, cfg.train.grad_accum,
                 cfg.train.precision, cfg.train.parallel)
        it = self._batches()
        self.model.train()
        t_last = time.time()
        for step in range(start + 1, cfg.train.max_steps + 1):
            self.step = step
            loss_acc = torch.zeros((), device=env.device)
            for micro in range(cfg.train.grad_accum):
                b = next(it)
                if cfg.checkpoint.exact_resume:
                    self.seen_keys.extend(b["keys"])
                x = b["latent"].to(env.device, non_blocking=True)
                y = b["label"].to(env.device, non_blocking=True)
                sync = micro == cfg.train.grad_accum - 1 or not hasattr(self.model, "no_sync")
                ctx = contextlib.nullcontext() if sync else self.model.no_sync()
                with ctx:
                    with self.autocast():
                        loss = self.diffusion.training_loss(self.model, x, y, env.rank, env.world)
                    (loss / cfg.train.grad_accum).backward()
                loss_acc += loss.detach() / cfg.train.grad_accum
            gnorm = torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad], cfg.train.grad_clip)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.sched.step()
            self.update_ema()
            logs = {}
            if step % cfg.train.log_every == 0 or step == 1:
                l = all_reduce_mean(loss_acc.clone(), env).item()
                dt = time.time() - t_last
                t_last = time.time()
                logs = {"loss": l, "lr": self.sched.get_last_lr()[0], "grad_norm": float(gnorm)}
                if env.is_main:
                    log.info("step %d | loss %.4f | grad_norm %.3f | lr %.2e | %.2fs", step, l, float(gnorm),
                             logs["lr"], dt)
            for cb in self.callbacks:
                cb.on_step_end(self, step, logs)
            if cfg.eval.every and step % cfg.eval.every == 0:
                metrics = self.evaluate()
                for cb in self.callbacks:
                    cb.on_evaluate(self, step, metrics)
            if cfg.checkpoint.every and step % cfg.checkpoint.every == 0:
                self.save_checkpoint(step)
        for cb in self.callbacks:
            cb.on_train_end(self)
        log.info("training finished at step %d", cfg.train.max_steps)
