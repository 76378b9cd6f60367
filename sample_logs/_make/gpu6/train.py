#!/usr/bin/env python
"""sftkit entry point.

    torchrun --nproc-per-node=2 train.py --config configs/chat_lora.yaml [--section.key=value ...]
"""
import logging
import os
import sys
import time

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from sftkit import __version__
from sftkit.callbacks import (CheckpointCallback, EarlyStoppingCallback, EvalCallback,
                              LoggingCallback, ProgressCallback)
from sftkit.checkpoint import CheckpointManager
from sftkit.config import dump, parse_args
from sftkit.data import ByteTokenizer, build_loader
from sftkit.distributed import cleanup, init_distributed
from sftkit.logging_utils import setup_logging
from sftkit.lora import apply_lora
from sftkit.model import CausalLM, count_params
from sftkit.optim import build_optimizer, build_scheduler
from sftkit.parallel import parallelize
from sftkit.trainer import Trainer

logger = logging.getLogger("sftkit.train")


def run(cfg):
    info = init_distributed(cfg.parallel.timeout_s)
    setup_logging(info.rank)
    logger.info("sftkit %s | torch %s | %s backend | world_size %d | device %s", __version__,
                torch.__version__, info.backend, info.world_size, info.device)
    logger.info("Config:\n%s", dump(cfg))
    torch.manual_seed(cfg.train.seed)

    tok = ByteTokenizer()
    train_ds, train_loader = build_loader(cfg, cfg.data.train_path, tok, info,
                                          cfg.train.micro_batch_size, train=True,
                                          max_seq_len=cfg.data.max_seq_len)
    eval_loader = None
    if cfg.eval.every:
        _, eval_loader = build_loader(cfg, cfg.data.eval_path, tok, info, cfg.eval.batch_size,
                                      train=False, max_seq_len=cfg.eval.max_seq_len or cfg.data.max_seq_len)
    logger.info("train dataset: %d examples (%s)", len(train_ds), cfg.data.train_path)

    model = CausalLM(cfg.model)
    if cfg.lora.enabled:
        apply_lora(model, cfg.lora)
    total, trainable = count_params(model)
    logger.info("model: %.2fM params, %.3fM trainable (%.2f%%)", total / 1e6, trainable / 1e6,
                100 * trainable / total)
    model = parallelize(model, cfg, info)
    if cfg.train.compile:
        model = torch.compile(model)
    optimizer = build_optimizer(cfg, model, info.device)
    scheduler = build_scheduler(cfg, optimizer)
    ckpt = CheckpointManager(cfg, info)

    callbacks = [ProgressCallback(), LoggingCallback(), EvalCallback(), CheckpointCallback()]
    if cfg.eval.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(cfg.eval.early_stopping_patience,
                                               cfg.eval.early_stopping_min_delta))
    trainer = Trainer(cfg, info, model, optimizer, scheduler, train_loader, eval_loader,
                      callbacks, ckpt)
    step = ckpt.resolve_resume()
    if step is not None:
        ts = ckpt.load(step, model, optimizer)
        trainer.state.step = ts["step"]
        for _ in range(trainer.state.step):
            scheduler.step()
        logger.info("Resumed at step %d", trainer.state.step)
    t0 = time.time()
    trainer.train()
    if cfg.export.merge_lora and cfg.lora.enabled:
        trainer.export()
    logger.info("Done in %.1fs", time.time() - t0)
    cleanup()


@record
def main():
    cfg = parse_args()
    run(cfg)


if __name__ == "__main__":
    main()
