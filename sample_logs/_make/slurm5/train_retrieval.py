#!/usr/bin/env python
"""Train the two-tower retrieval model with DDP (gloo) on CPU.

    python train_retrieval.py --config configs/sasrec_small.toml [--set optim.lr=3e-4 ...]

Launched by torchrun / python -m torch.distributed.run, or directly by srun (rank from SLURM_PROCID).
"""
import argparse
import faulthandler
import json
import logging
import os
import socket
import sys
import time

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from retrieval import __version__, checkpoint, config, distenv, logutil
from retrieval.data import Hasher, TrainShard, load_eval
from retrieval.evaluate import evaluate
from retrieval.model import TwoTower

log = logging.getLogger("retrieval.train")


def get_clipper(impl):
    if impl == "legacy":
        from retrieval.contrib.legacy_clip import clip_grad_norm_fp32

        return clip_grad_norm_fp32
    return torch.nn.utils.clip_grad_norm_


def metrics(rank, **kv):
    if rank == 0:
        print(json.dumps({"ts": round(time.time(), 3), **kv}), flush=True)


def fit(cfg, rank, world):
    c = config.Cfg(cfg)
    torch.manual_seed(c.seed)
    data_root = os.path.expandvars(c.data.root)
    n_items = c.data.n_items
    model = TwoTower(n_items, dim=c.model.dim, heads=c.model.heads, layers=c.model.layers,
                     max_seq_len=c.model.max_seq_len, device_buckets=c.features.get("device_buckets", 0))
    log.info("model: %.2fM parameters, dim=%d heads=%d max_seq_len=%d", sum(p.numel() for p in model.parameters()) / 1e6,
             c.model.dim, c.model.heads, c.model.max_seq_len)
    if c.model.get("pretrained_items"):
        checkpoint.load_item_table(model, os.path.expandvars(c.model.pretrained_items), rank, world)

    optim = torch.optim.AdamW(model.parameters(), lr=c.optim.lr, weight_decay=c.optim.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(optim, max_lr=c.optim.lr, total_steps=c.train.max_steps,
                                                pct_start=c.sched.pct_start, anneal_strategy=c.sched.anneal)
    clip = get_clipper(c.optim.get("clip_impl", "torch"))
    step = 0
    ckpt_path = os.path.join(os.path.expandvars(c.ckpt.dir), "last.pt")
    if c.ckpt.get("resume") and os.path.exists(ckpt_path):
        step = checkpoint.resume(ckpt_path, model, optim, sched)

    ddp = DDP(model) if world > 1 else model
    hasher = Hasher(c.features.get("device_buckets", 1 << 12), native=c.features.get("native_hash", False))
    shard = TrainShard(data_root, rank, n_items, c.train.batch_size, c.train.num_negatives, hasher,
                       seed=c.seed + rank)
    log.info("training: %d steps/epoch, max_steps=%d, global batch %d", len(shard), c.train.max_steps,
             c.train.batch_size * world)
    t0 = time.time()
    while step < c.train.max_steps:
        for batch in shard:
            loss = ddp(batch["hist"], batch["target"], batch["negs"], batch.get("device"))
            optim.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = clip(model.parameters(), c.optim.clip)
            optim.step()
            sched.step()
            step += 1
            if step % c.train.log_every == 0:
                log.info("step %d/%d loss=%.4f gnorm=%.3f lr=%.2e (%.2fs/step)", step, c.train.max_steps, loss.item(),
                         float(gnorm), sched.get_last_lr()[0], (time.time() - t0) / step)
                metrics(rank, event="train", step=step, loss=round(loss.item(), 5), lr=sched.get_last_lr()[0])
            if step >= c.train.max_steps:
                break

    model.eval()
    hist, hist_len, target = load_eval(data_root, rank)
    res = evaluate(model, hist, hist_len, target, cfg["eval"], n_items)
    log.info("eval: %s", " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()))
    metrics(rank, event="eval", step=step, **res)
    if rank == 0:
        checkpoint.save(ckpt_path, model, optim, sched, step, cfg)
    distenv.barrier()


@record
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    faulthandler.enable()
    rank, local_rank, world = distenv.discover()
    logutil.setup(rank, world)
    cfg = config.apply_overrides(config.load(args.config), args.set)
    log.info("retrieval %s torch %s on %s pid=%d rank=%d local_rank=%d world=%d", __version__, torch.__version__,
             socket.gethostname(), os.getpid(), rank, local_rank, world)
    if rank == 0:
        log.info("config: %s", json.dumps(cfg, sort_keys=True))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    distenv.init(cfg.get("dist", {}), rank, world)
    try:
        fit(cfg, rank, world)
    except Exception:
        log.exception("training failed on rank %d", rank)
        raise
    distenv.shutdown()
    log.info("done")


if __name__ == "__main__":
    sys.exit(main())
