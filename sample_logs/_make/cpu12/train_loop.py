#!/usr/bin/env python
"""Continued pretraining with a plain accelerate loop; each process streams its own jsonl shards.

Usage:
  accelerate launch --cpu --num_processes 2 train_loop.py --config loop.yaml
  torchrun --nproc-per-node 4 train_loop.py --config loop.yaml
"""
import argparse
import logging
import math
import os
import time
from datetime import timedelta

import torch
import yaml
from accelerate import Accelerator, InitProcessGroupKwargs
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

from textft.collate import CausalLMCollator
from textft.data import JsonlTextDataset, ShardedJsonlStream
from textft.modeling import build_model
from textft.tok import load_tokenizer

logger = get_logger("train_loop")

DEFAULTS = {
    "model_config": "configs/gpt2_tiny.yaml",
    "tokenizer_dir": "tokenizer",
    "train_glob": "data/shards/*.jsonl",
    "validation_file": "data/valid.jsonl",
    "max_seq_length": 128,
    "batch_size": 8,
    "lr": 3e-4,
    "weight_decay": 0.01,
    "max_steps": 60,
    "eval_every": 20,
    "log_every": 5,
    "seed": 42,
    "output_dir": "out",
    "resume_from": None,
    "pg_timeout": 30,
    "cpu": False,
    "report": {"plot": False},
}


def load_config():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--max_steps", type=int)
    p.add_argument("--output_dir")
    p.add_argument("--resume_from")
    a = p.parse_args()
    cfg = dict(DEFAULTS)
    with open(a.config) as f:
        cfg.update(yaml.safe_load(f) or {})
    for k in ("max_steps", "output_dir", "resume_from"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    return cfg


@torch.no_grad()
def evaluate(model, loader, accelerator):
    model.eval()
    losses = []
    for batch in loader:
        out = model(**batch)
        losses.append(accelerator.gather_for_metrics(out.loss.detach().reshape(1)))
    model.train()
    loss = torch.cat(losses).mean().item()
    return loss, math.exp(min(loss, 20))


def main():
    cfg = load_config()
    pg_kwargs = InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=cfg["pg_timeout"]))
    accelerator = Accelerator(cpu=cfg["cpu"], kwargs_handlers=[pg_kwargs])
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        level=logging.INFO,
    )
    logger.info(accelerator.state, main_process_only=False)
    logger.info(f"config: {cfg}")
    set_seed(cfg["seed"])

    tokenizer = load_tokenizer(cfg["tokenizer_dir"])
    model = build_model(cfg["model_config"], tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    collator = CausalLMCollator(tokenizer)

    train_ds = ShardedJsonlStream(
        cfg["train_glob"], tokenizer, accelerator.process_index, accelerator.num_processes,
        max_seq_length=cfg["max_seq_length"], epochs=1000,
    )
    logger.info(f"process {accelerator.process_index}: shards {train_ds.files}", main_process_only=False)
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], collate_fn=collator)
    eval_ds = JsonlTextDataset(cfg["validation_file"], tokenizer, cfg["max_seq_length"])
    eval_loader = DataLoader(eval_ds, batch_size=cfg["batch_size"], collate_fn=collator)

    model, optimizer, eval_loader = accelerator.prepare(model, optimizer, eval_loader)

    step = 0
    if cfg["resume_from"]:
        logger.info(f"resuming from {cfg['resume_from']}")
        accelerator.load_state(cfg["resume_from"])
        with open(os.path.join(cfg["resume_from"], "step.txt")) as f:
            step = int(f.read())

    history = []
    t0 = time.time()
    model.train()
    it = iter(train_loader)
    while step < cfg["max_steps"]:
        batch = next(it)
        out = model(**batch)
        accelerator.backward(out.loss)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step % cfg["log_every"] == 0:
            loss = accelerator.reduce(out.loss.detach(), reduction="mean").item()
            history.append({"step": step, "loss": loss})
            logger.info(f"step {step}/{cfg['max_steps']} loss {loss:.4f} ({(time.time() - t0) / step:.2f}s/step)")
        if step % cfg["eval_every"] == 0:
            eloss, ppl = evaluate(model, eval_loader, accelerator)
            logger.info(f"eval step {step}: loss {eloss:.4f} ppl {ppl:.2f}")

    ckpt = os.path.join(cfg["output_dir"], f"step-{step}")
    accelerator.save_state(ckpt)
    if accelerator.is_main_process:
        with open(os.path.join(ckpt, "step.txt"), "w") as f:
            f.write(str(step))
        if cfg["report"].get("plot"):
            from textft.report import write_report

            write_report(history, os.path.join(cfg["output_dir"], "report"))
    accelerator.wait_for_everyone()
    logger.info(f"done: {step} steps in {time.time() - t0:.1f}s")
    accelerator.end_training()


if __name__ == "__main__":
    main()
