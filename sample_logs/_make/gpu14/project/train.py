#!/usr/bin/env python
"""Pretrain a GPT-style language model on pre-tokenized shards.

    torchrun --nproc-per-node 8 train.py --config configs/gpt2-124m.json train.max_steps=5000

Any config value can be overridden on the command line as section.key=value.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from lm import __version__, checkpoint
from lm.config import Config, load_config
from lm.data import build_train_loader, build_val_loader, forever
from lm.distributed import (DistInfo, allreduce_gradients, allreduce_mean, broadcast_parameters, cleanup,
                            init_distributed)
from lm.model import GPT
from lm.tracking import make_tracker

logger = logging.getLogger("lm.train")


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


def setup_logging(rank: int, log_file: str) -> None:
    fmt = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s][rank %(rank)d] - %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_file:
        path = log_file.format(rank=rank)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        handlers.append(logging.FileHandler(path))
    for h in handlers:
        h.setFormatter(fmt)
        h.addFilter(_RankFilter(rank))
        root.addHandler(h)


def lr_at(step: int, cfg: Config) -> float:
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps))
    return t.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.lr - t.min_lr)


@torch.no_grad()
def evaluate(model, loader, info: DistInfo, amp, max_batches: int) -> float:
    model.eval()
    totals = torch.zeros(2, device=info.device)
    for i, (x, y) in enumerate(loader):
        if 0 < max_batches <= i:
            break
        x, y = x.to(info.device, non_blocking=True), y.to(info.device, non_blocking=True)
        with amp:
            _, loss = model(x, y)
        totals[0] += loss.float()
        totals[1] += 1
    totals = allreduce_mean(totals, info)
    model.train()
    return (totals[0] / totals[1]).item()


@record
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/gpt2-124m.json")
    ap.add_argument("overrides", nargs="*", help="section.key=value")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)

    rank = int(os.environ.get("RANK", 0))
    setup_logging(rank, cfg.system.log_file)
    info = init_distributed(cfg.system)
    if info.is_main:
        logger.info("lm %s, torch %s, world size %d, backend %s", __version__, torch.__version__,
                    info.world_size, cfg.system.backend)
        logger.info("config: %s", json.dumps(cfg.to_dict(), sort_keys=True))
    logger.info("device %s (local rank %d)", info.device, info.local_rank)
    torch.manual_seed(cfg.train.seed)

    device_type = info.device.type
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg.system.dtype]
    amp = (torch.autocast(device_type=device_type, dtype=ptdtype) if ptdtype != torch.float32
           else contextlib.nullcontext())
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    tracker = make_tracker(cfg.system.wandb, cfg.system.wandb_project, cfg.to_dict(), info.rank)

    seq_len = cfg.model.block_size
    train_loader = build_train_loader(cfg.data, seq_len, cfg.train.micro_batch_size, info.rank, cfg.train.seed)
    val_loader = build_val_loader(cfg.data, seq_len, cfg.train.micro_batch_size, info.rank)

    raw_model = GPT(cfg.model).to(info.device)
    if info.is_main:
        logger.info("model: %.1fM parameters, %d layers, %d heads, d_model %d", raw_model.num_params() / 1e6,
                    cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd)
    optimizer = raw_model.configure_optimizer(cfg.train.weight_decay, cfg.train.lr, device_type)

    start_step = 0
    ckpt_path = checkpoint.resolve(cfg.train.resume, cfg.train.out_dir)
    if ckpt_path:
        start_step = checkpoint.load(ckpt_path, raw_model, optimizer, info.device)
    broadcast_parameters(raw_model, info)

    model = raw_model
    if cfg.train.compile:
        logger.info("compiling the model (fullgraph=%s)", cfg.train.compile_fullgraph)
        model = torch.compile(raw_model, fullgraph=cfg.train.compile_fullgraph)

    batches = forever(train_loader)
    tokens_per_step = cfg.train.micro_batch_size * seq_len * cfg.train.grad_accum_steps * info.world_size
    if info.is_main:
        logger.info("training steps %d..%d, %d tokens per step, grad accumulation %d", start_step,
                    cfg.train.max_steps, tokens_per_step, cfg.train.grad_accum_steps)
    t0 = time.time()
    for step in range(start_step, cfg.train.max_steps):
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_acc = torch.zeros((), device=info.device)
        for _ in range(cfg.train.grad_accum_steps):
            x, y = next(batches)
            x, y = x.to(info.device, non_blocking=True), y.to(info.device, non_blocking=True)
            with amp:
                _, loss = model(x, y)
                loss = loss / cfg.train.grad_accum_steps
            loss.backward()
            loss_acc += loss.detach()
        allreduce_gradients(raw_model, info)
        grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % cfg.train.log_every == 0:
            loss_val = allreduce_mean(loss_acc.reshape(1), info).item()
            dt = time.time() - t0
            t0 = time.time()
            if info.is_main:
                mem = torch.cuda.max_memory_allocated() / 2**30 if device_type == "cuda" else 0.0
                logger.info("step %5d | loss %.4f | lr %.2e | grad_norm %.3f | %.0f tok/s | mem %.2f GiB",
                            step, loss_val, lr, grad_norm.item(), tokens_per_step * cfg.train.log_every / dt, mem)
                tracker.log({"loss": loss_val, "lr": lr}, step)
        if cfg.train.eval_every and (step + 1) % cfg.train.eval_every == 0:
            val = evaluate(model, val_loader, info, amp, cfg.data.val_batches)
            if info.is_main:
                logger.info("step %5d | val_loss %.4f", step, val)
                tracker.log({"val_loss": val}, step)
        if info.is_main and cfg.train.ckpt_every and (step + 1) % cfg.train.ckpt_every == 0:
            checkpoint.save(os.path.join(cfg.train.out_dir, "ckpt.pt"), raw_model, optimizer, step + 1,
                            cfg.to_dict())

    if info.is_main:
        logger.info("training finished at step %d", cfg.train.max_steps)
    tracker.finish()
    cleanup()


if __name__ == "__main__":
    main()
