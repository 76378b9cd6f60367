import contextlib
import logging
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from .callbacks import Checkpointer, LossLogger, SampleGrid
from .checkpoint import CheckpointManager
from .data import build_loader
from .diffusion import GaussianDiffusion
from .ema import EMA
from .unet import UNet

log = logging.getLogger("ddpmlite.trainer")


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        tc = cfg.train
        self.device = torch.device(tc.device.format(rank=self.rank, local_rank=self.local_rank))
        log.info("rank %d/%d pid %d host %s device %s", self.rank, self.world, os.getpid(), socket.gethostname(),
                 self.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1:
            dist.init_process_group(tc.backend, timeout=timedelta(seconds=tc.dist_timeout_s))
            if self.rank == 0:
                log.info("process group ready: backend=%s world_size=%d", tc.backend, self.world)
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(tc.precision)

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def setup(self):
        cfg = self.cfg
        torch.manual_seed(cfg.train.seed)
        model = UNet(cfg.model).to(self.device)
        if self.rank == 0:
            log.info("UNet: %.2fM parameters, channels %d x %s, attention at levels %s", model.num_params() / 1e6,
                     cfg.model.base_channels, cfg.model.channel_mult, cfg.model.attn_levels)
        self.raw_model = model
        self.ema = EMA(model, cfg.ema.decay, cfg.ema.warmup, cfg.ema.dtype)
        self.diffusion = GaussianDiffusion(cfg.diffusion, self.device)
        oc = cfg.optim
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=oc.lr, betas=tuple(oc.betas),
                                           weight_decay=oc.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / max(1, oc.warmup_steps)))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=(cfg.train.precision == "fp16"))
        self.ckpt = CheckpointManager(cfg.train.ckpt_dir, cfg.train.keep_last, self.rank, self.local_rank)
        self.start_step = 0
        if cfg.train.resume:
            path = self.ckpt.resolve(cfg.train.resume)
            if path:
                st = self.ckpt.load(path, self.device)
                model.load_state_dict(st["model"])
                self.ema.load_state_dict(st["ema"])
                self.optimizer.load_state_dict(st["optimizer"])
                self.scheduler.load_state_dict(st["scheduler"])
                self.scaler.load_state_dict(st["scaler"])
                self.start_step = st["step"]
                log.info("resumed at step %d", self.start_step)
            else:
                log.info("no checkpoint under %s, starting from scratch", cfg.train.ckpt_dir)
        if self.world > 1:
            model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.model = model
        self.loader, self.sampler = build_loader(cfg, self.rank, self.world, cfg.train.seed,
                                                 pin_memory=self.device.type == "cuda")
        self.image_size = cfg.data.crop_size or self.loader.dataset.image_size
        self.num_classes = cfg.model.num_classes
        self.callbacks = [LossLogger(cfg.train.log_every), SampleGrid(cfg.sample), Checkpointer(cfg.train.save_every)]

    def save(self, step):
        self.ckpt.save(step, {"model": self.raw_model.state_dict(), "ema": self.ema.state_dict(),
                              "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                              "scaler": self.scaler.state_dict(), "step": step})

    def batches(self):
        epoch = 0
        while True:
            self.sampler.set_epoch(epoch)
            for b in self.loader:
                yield b
            epoch += 1

    def train(self):
        cfg, tc = self.cfg, self.cfg.train
        for cb in self.callbacks:
            cb.on_train_start(self)
        if self.rank == 0:
            log.info("training from step %d to %d (batch %d/rank, precision %s, %d timesteps)", self.start_step,
                     tc.max_steps, cfg.data.batch_size, tc.precision, cfg.diffusion.timesteps)
        self.model.train()
        step = self.start_step
        it = self.batches()
        while step < tc.max_steps:
            x, y = next(it)
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True) if cfg.model.num_classes else None
            with self.autocast():
                loss = self.diffusion.loss(self.model, x, y)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            if cfg.optim.clip_grad:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), cfg.optim.clip_grad)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            self.ema.update(self.raw_model)
            step += 1
            lv = loss.item()
            for cb in self.callbacks:
                cb.on_step_end(self, step, lv)
        for cb in self.callbacks:
            cb.on_train_end(self)
        if self.world > 1:
            dist.barrier()
        if self.rank == 0:
            log.info("done: %d steps", step)

    def close(self):
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
