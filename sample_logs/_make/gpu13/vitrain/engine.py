"""Distributed training loop: DDP over gloo or nccl, AMP, torch.compile, mixup, EMA, eval, checkpoints."""
from __future__ import annotations

import contextlib
import copy
import datetime
import logging
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from .checkpoint import CheckpointManager
from .config import to_dict
from .data import build_train_loader, build_val_loader
from .ema import ModelEma
from .model import build_model
from .schedule import warmup_cosine
from .trackers import build_tracker

log = logging.getLogger(__name__)

_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def _env_int(name, default):
    return int(os.environ.get(name, default))


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rank = _env_int("RANK", 0)
        self.world = _env_int("WORLD_SIZE", 1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.workdir = os.getcwd()

    # ------------------------------------------------------------------ setup
    def setup(self):
        c = self.cfg
        dev = c.train.device
        if dev == "cuda":
            dev = "cuda:0"   # one GPU on this host: every rank shares it
        self.device = torch.device(dev)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        torch.manual_seed(c.train.seed + self.rank)
        np.random.seed(c.train.seed + self.rank)
        if self.world > 1 or "MASTER_ADDR" in os.environ:
            dist.init_process_group(backend=c.train.backend, rank=self.rank, world_size=self.world,
                                    timeout=datetime.timedelta(seconds=c.train.dist_timeout_s))
            self.distributed = True
        else:
            self.distributed = False
        log.info("process group ready: backend=%s device=%s pid=%d", c.train.backend if self.distributed else "-",
                 self.device, os.getpid())

        model = build_model(c.model).to(self.device)
        if c.train.precision == "fp16":
            # fp16 weights too: halves weight and optimizer-state memory; the GradScaler keeps gradients in range
            model = model.half()
        if c.train.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.raw_model = model
        n_params = sum(p.numel() for p in model.parameters())
        if self.rank == 0:
            log.info("model: ViT %dx%d/%d, dim %d, depth %d, heads %d, %.2fM params", c.model.img_size,
                     c.model.img_size, c.model.patch_size, c.model.embed_dim, c.model.depth, c.model.num_heads,
                     n_params / 1e6)
        self.ema = ModelEma(model, c.ema.decay) if c.ema.enabled else None

        decay, no_decay = [], []
        for n, p in model.named_parameters():
            (no_decay if p.ndim <= 1 or n in ("pos_embed", "cls_token") else decay).append(p)
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": c.optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=c.optim.lr, betas=tuple(c.optim.betas), fused=self.device.type == "cuda")
        self.scheduler = warmup_cosine(self.optimizer, c.optim.warmup_steps, c.train.max_steps, c.optim.lr,
                                       c.optim.min_lr)
        self.amp_dtype = _DTYPES[c.train.precision]
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=c.amp.init_scale,
                                           growth_interval=c.amp.growth_interval,
                                           enabled=c.train.precision == "fp16")

        fwd = model
        if c.compile.enabled:
            dynamo_cfg = torch._dynamo.config
            if hasattr(dynamo_cfg, "recompile_limit"):
                dynamo_cfg.recompile_limit = c.compile.recompile_limit
            else:
                dynamo_cfg.cache_size_limit = c.compile.recompile_limit
            fwd = torch.compile(model, backend=c.compile.backend, fullgraph=c.compile.fullgraph,
                                dynamic=c.compile.dynamic,
                                mode=None if c.compile.backend != "inductor" else c.compile.mode)
            log.info("torch.compile: backend=%s mode=%s fullgraph=%s dynamic=%s", c.compile.backend,
                     c.compile.mode, c.compile.fullgraph, c.compile.dynamic)
        self.model = DDP(fwd, device_ids=None) if self.distributed else fwd

        self.ckpt = CheckpointManager(c.ckpt.dir, c.ckpt.keep, self.rank)
        self.step = 0
        if c.ckpt.resume:
            self._resume(c.ckpt.resume)

        self.train_loader, self.train_sampler = build_train_loader(c.data, c.aug, self.rank, self.world,
                                                                   c.train.seed, self.device)
        self.val_loader = build_val_loader(c.data, c.eval, self.rank, self.world, self.device)
        self.mean = torch.tensor(c.data.mean, device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(c.data.std, device=self.device).view(1, 3, 1, 1) * 255
        self.tracker = build_tracker(c.log.tracker, self.workdir, to_dict(c)) if self.rank == 0 else None

    def _resume(self, spec):
        state = self.ckpt.load(spec)
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        if self.ema is not None and "ema" in state:
            self.ema.load_state_dict(state["ema"])
        self.step = state["step"]
        log.info("resumed at step %d", self.step)

    # --------------------------------------------------------------- helpers
    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _prep(self, x):
        x = x.to(self.device, non_blocking=True)
        if self.cfg.train.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return (x.float() - self.mean) / self.std

    def _mixup(self, x, y):
        c = self.cfg
        n_cls = c.model.num_classes
        if c.aug.mixup_alpha <= 0:
            return x, y
        lam = float(np.random.beta(c.aug.mixup_alpha, c.aug.mixup_alpha))
        y1 = F.one_hot(y, n_cls).float()
        ls = c.aug.label_smoothing
        y1 = y1 * (1 - ls) + ls / n_cls
        x = lam * x + (1 - lam) * x.flip(0)
        return x, lam * y1 + (1 - lam) * y1.flip(0)

    def _loss(self, logits, target):
        if target.dtype == torch.long:
            return F.cross_entropy(logits.float(), target, label_smoothing=self.cfg.aug.label_smoothing)
        return torch.sum(-target * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()

    def _batches(self):
        epoch = 0
        while True:
            self.train_sampler.set_epoch(epoch)
            for b in self.train_loader:
                yield epoch, b
            epoch += 1

    # ------------------------------------------------------------------ train
    def train(self):
        c = self.cfg
        log.info("training from step %d to %d, %d ranks, batch %d/rank, precision %s", self.step, c.train.max_steps,
                 self.world, c.data.batch_size, c.train.precision)
        self.model.train()
        t0, seen, loss_sum, loss_n = time.time(), 0, 0.0, 0
        params = [p for p in self.raw_model.parameters() if p.requires_grad]
        for epoch, (x, y) in self._batches():
            if self.step >= c.train.max_steps:
                break
            x, y = self._prep(x), y.to(self.device, non_blocking=True)
            if c.data.drop_unlabeled:
                keep = y >= 0
                x, y = x[keep], y[keep]
            x, target = self._mixup(x, y)
            with self._autocast():
                logits = self.model(x)
            loss = self._loss(logits, target)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            gnorm = torch.nn.utils.clip_grad_norm_(params, c.optim.clip_grad, error_if_nonfinite=True)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            if self.ema is not None:
                self.ema.update(self.raw_model)
            self.step += 1
            seen += x.shape[0]
            loss_sum += loss.item()
            loss_n += 1
            if self.step % c.log.every == 0 or self.step == 1:
                dt = time.time() - t0
                lr = self.optimizer.param_groups[0]["lr"]
                log.info("step %d/%d epoch %d loss %.4f lr %.3e gnorm %.3f %.0f img/s", self.step, c.train.max_steps,
                         epoch, loss_sum / loss_n, lr, float(gnorm), seen / max(dt, 1e-6))
                if self.tracker:
                    self.tracker.log(self.step, {"loss": loss_sum / loss_n, "lr": lr})
                t0, seen, loss_sum, loss_n = time.time(), 0, 0.0, 0
            if c.eval.every and self.step % c.eval.every == 0:
                self.evaluate()
                self.model.train()
            if c.ckpt.every and self.step % c.ckpt.every == 0:
                self.save()
        if self.distributed:
            dist.barrier()
        log.info("finished at step %d", self.step)

    def save(self):
        state = {"step": self.step, "model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict()}
        if self.ema is not None:
            state["ema"] = self.ema.state_dict()
        self.ckpt.save(self.step, state)

    # ------------------------------------------------------------------- eval
    @torch.no_grad()
    def evaluate(self):
        c = self.cfg
        net = self.raw_model
        if self.ema is not None:
            net = copy.deepcopy(self.raw_model)
            self.ema.copy_to(net)
        net.eval()
        correct = torch.zeros((), device=self.device)
        total = torch.zeros((), device=self.device)
        for x, y in self.val_loader:
            x, y = self._prep(x), y.to(self.device)
            with self._autocast():
                pred = net(x).argmax(-1)
            correct += (pred == y).sum()
            total += y.numel()
        stats = torch.stack([correct, total])
        if self.distributed:
            dist.all_reduce(stats)
        acc = (stats[0] / stats[1].clamp(min=1)).item()
        log.info("eval step %d: top1 %.2f%% on %d images%s", self.step, 100 * acc, int(stats[1].item()),
                 " (ema)" if self.ema is not None else "")
        if self.tracker:
            self.tracker.log(self.step, {"val_top1": acc})
        if c.eval.attn_maps and self.rank == self.world - 1:
            self._attention_maps(net)

    def _attention_maps(self, net):
        c = self.cfg
        xs = [self.val_loader.dataset[i][0] for i in range(c.eval.map_images)]
        x = self._prep(torch.stack(xs))
        if c.eval.map_size != x.shape[-1]:
            x = F.interpolate(x, size=(c.eval.map_size, c.eval.map_size), mode="bilinear", align_corners=False)
        with self._autocast():
            maps = net.attention_rollout(x)
        out = os.path.join(self.workdir, "attn_maps", f"step_{self.step:06d}.npy")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        np.save(out, maps.float().cpu().numpy())
        log.info("attention maps %s -> %s", tuple(maps.shape), out)

    def close(self):
        if self.tracker:
            self.tracker.close()
        if self.distributed:
            dist.destroy_process_group()
