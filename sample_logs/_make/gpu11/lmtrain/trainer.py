import contextlib
import logging
import math
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from .callbacks import Checkpointer, Evaluator, MetricLogger, ProgressBar
from .checkpoint import CheckpointManager
from .data import build_loader
from .model import Transformer

log = logging.getLogger("lmtrain.trainer")


class WarmupCosine:
    def __init__(self, warmup, total, min_ratio):
        self.warmup, self.total, self.min_ratio = warmup, total, min_ratio

    def __call__(self, step):
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = (step - self.warmup) / (self.total - self.warmup)
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        tc = cfg.train
        if tc.device == "cuda":
            idx = self.local_rank if tc.device_index < 0 else tc.device_index
            self.device = torch.device("cuda", idx)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if self.world > 1:
            dist.init_process_group(tc.backend, timeout=timedelta(seconds=tc.dist_timeout_s))
            log.info("process group ready: backend=%s world_size=%d device=%s", tc.backend, self.world, self.device)
        torch.manual_seed(tc.seed + self.rank)
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(tc.precision)

    # -- helpers -------------------------------------------------------
    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def to_device(self, batch):
        return {k: (v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}

    def all_reduce(self, t):
        if self.world > 1:
            dist.all_reduce(t)
        return t

    def build_val_loader(self):
        return build_loader(self.cfg, "val")

    # -- setup ---------------------------------------------------------
    def setup(self):
        cfg = self.cfg
        torch.manual_seed(cfg.train.seed)
        model = Transformer(cfg.model).to(self.device)
        log.info("model: %.2fM parameters, %d layers, d_model=%d, heads=%d, attn=%s",
                 model.num_params() / 1e6, cfg.model.n_layers, cfg.model.d_model, cfg.model.n_heads,
                 cfg.model.attn_impl)
        self.raw_model = model
        if cfg.train.compile:
            model = torch.compile(model)
        if self.world > 1:
            model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.model = model
        oc = cfg.optim
        decay = [p for n, p in self.raw_model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.raw_model.named_parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": oc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=oc.lr, betas=tuple(oc.betas))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, WarmupCosine(oc.warmup_steps, cfg.train.max_steps, oc.min_lr / oc.lr))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=(cfg.train.precision == "fp16"))
        self.ckpt = CheckpointManager(cfg.train.ckpt_dir, cfg.train.keep_last, self.rank)
        self.start_step = 0
        self.tokens_seen = 0
        if cfg.train.resume:
            path = self.ckpt.resolve(cfg.train.resume)
            if path:
                st = self.ckpt.load(path, self.raw_model, self.optimizer, self.scheduler, self.device)
                self.start_step = st["step"]
                self.tokens_seen = st.get("tokens_seen", 0)
            else:
                log.info("no checkpoint found under %s, starting from scratch", cfg.train.ckpt_dir)
        self.step = self.start_step
        self.loader = build_loader(cfg, "train")
        self.callbacks = [ProgressBar(cfg.train.max_steps, cfg.train.log_every),
                          MetricLogger(cfg.train.log_every),
                          Evaluator(cfg.train.eval_every, cfg.train.eval_batches, cfg.train.eval_jsonl),
                          Checkpointer(cfg.train.save_every)]

    def save(self, step):
        self.ckpt.save(step, self.raw_model, self.optimizer, self.scheduler, {"tokens_seen": self.tokens_seen})

    # -- loop ----------------------------------------------------------
    def train(self):
        cfg = self.cfg
        tc = cfg.train
        it = iter(self.loader)
        for cb in self.callbacks:
            cb.on_train_start(self)
        log.info("starting training at step %d (max_steps=%d, grad_accum=%d, micro_batch=%d, precision=%s)",
                 self.start_step, tc.max_steps, tc.grad_accum, cfg.data.micro_batch_size, tc.precision)
        self.model.train()
        t_last = time.time()
        while self.step < tc.max_steps:
            loss_acc = 0.0
            ntok = 0
            for micro in range(tc.grad_accum):
                batch = self.to_device(next(it))
                sync = contextlib.nullcontext()
                if self.world > 1 and micro < tc.grad_accum - 1:
                    sync = self.model.no_sync()
                with sync:
                    with self.autocast():
                        _, loss = self.model(batch["input_ids"], batch["labels"], batch["attn_mask"])
                        loss = loss / tc.grad_accum
                    self.scaler.scale(loss).backward()
                loss_acc += loss.item()
                ntok += batch["num_tokens"]
            self.scaler.unscale_(self.optimizer)
            gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.clip_grad if cfg.optim.clip_grad > 0 else 1e9)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            self.step += 1
            self.tokens_seen += ntok
            dt = time.time() - t_last
            t_last = time.time()
            metrics = {"loss": loss_acc, "lr": self.scheduler.get_last_lr()[0], "grad_norm": float(gn),
                       "tokens": self.tokens_seen, "tok_s": ntok * self.world / max(dt, 1e-6)}
            for cb in self.callbacks:
                cb.on_step_end(self, self.step, metrics)
            if tc.max_tokens and self.tokens_seen >= tc.max_tokens:
                log.info("token budget reached (%d >= %d) at step %d", self.tokens_seen, tc.max_tokens, self.step)
                break
        for cb in self.callbacks:
            cb.on_train_end(self)
        if self.world > 1:
            dist.barrier()
        log.info("training done: %d steps, %d tokens", self.step, self.tokens_seen)

    def close(self):
        if dist.is_initialized():
            dist.destroy_process_group()
