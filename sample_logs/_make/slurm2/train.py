#!/usr/bin/env python
"""Data-parallel pretraining of a residual MLP classifier on tinydata shards.

Works under torchrun (RANK/LOCAL_RANK/WORLD_SIZE in the environment) and
under plain `srun python train.py` (ranks taken from SLURM_PROCID / SLURM_LOCALID /
SLURM_NTASKS).  Each rank reads the shard matching its global rank.
"""
import argparse
import json
import logging
import math
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from tinydata import ShardReader, load_meta, shard_for_rank

log = logging.getLogger("train")


# --------------------------------------------------------------------------- args
def parse_args(argv=None):
    p = argparse.ArgumentParser(description="DDP pretraining of a residual MLP on tinydata shards")
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", required=True, help="tinydata dataset directory (meta.json + part-*.bin)")
    g.add_argument("--holdout-frac", type=float, default=0.1)
    g.add_argument("--stats-cache", default=None,
                   help="node-local path of the feature mean/std cache (computed by local rank 0 if missing)")
    g = p.add_argument_group("model")
    g.add_argument("--hidden", type=int, default=512)
    g.add_argument("--depth", type=int, default=4)
    g.add_argument("--dropout", type=float, default=0.1)
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, default=2)
    g.add_argument("--max-steps", type=int, default=-1, help="stop after this many optimizer steps (-1: epochs)")
    g.add_argument("--batch-size", type=int, default=128, help="per-rank micro batch")
    g.add_argument("--lr", type=float, default=2e-3)
    g.add_argument("--weight-decay", type=float, default=0.05)
    g.add_argument("--warmup-steps", type=int, default=50)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=17)
    g = p.add_argument_group("checkpointing / logging")
    g.add_argument("--out-dir", default="checkpoints")
    g.add_argument("--save-every", type=int, default=0, help="save every N steps (0: end of epoch only)")
    g.add_argument("--resume", default=None, help="'auto' or a step directory to resume from")
    g.add_argument("--log-every", type=int, default=25)
    g = p.add_argument_group("distributed")
    g.add_argument("--backend", default="gloo")
    g.add_argument("--dist-url", default="env://")
    g.add_argument("--dist-timeout", type=int, default=60, help="collective timeout in seconds")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- dist
def dist_env():
    """(rank, local_rank, world_size) from torchrun or from SLURM."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return (int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)),
                int(os.environ["WORLD_SIZE"]))
    if "SLURM_PROCID" in os.environ:
        return (int(os.environ["SLURM_PROCID"]), int(os.environ.get("SLURM_LOCALID", 0)),
                int(os.environ["SLURM_NTASKS"]))
    return 0, 0, 1


def setup_logging(rank):
    fmt = f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt, datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stdout)


def init_distributed(args, rank, world_size):
    t0 = time.time()
    dist.init_process_group(
        backend=args.backend,
        init_method=args.dist_url,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=args.dist_timeout),
    )
    log.info("process group ready: backend=%s world_size=%d host=%s (%.1fs)",
             args.backend, world_size, socket.gethostname(), time.time() - t0)


# --------------------------------------------------------------------------- model
class Block(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class ResMLP(nn.Module):
    def __init__(self, in_features, hidden, depth, num_classes, dropout):
        super().__init__()
        self.stem = nn.Linear(in_features, hidden)
        self.blocks = nn.Sequential(*[Block(hidden, dropout) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


# --------------------------------------------------------------------------- data
def feature_stats(x, cache_path, local_rank):
    """Node-local cache of feature statistics; local rank 0 builds it, the others wait."""
    if cache_path is None:
        return x.mean(0), x.std(0).clamp_min(1e-6)
    if local_rank == 0 and not os.path.exists(cache_path):
        from tinydata.prep import compute_feature_stats, save_stats
        os.makedirs(os.path.dirname(cache_path), exist_ok=True)
        save_stats(compute_feature_stats(x), cache_path)
        log.info("wrote feature stats cache %s", cache_path)
    dist.barrier()
    st = torch.load(cache_path)
    return st["mean"], st["std"]


def batches(x, y, batch_size, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    for i in range(0, x.shape[0] - batch_size + 1, batch_size):
        idx = perm[i:i + batch_size]
        yield x[idx], y[idx]


# --------------------------------------------------------------------------- ckpt
def save_checkpoint(args, rank, model, opt, step, epoch):
    d = os.path.join(args.out_dir, f"step_{step:06d}")
    os.makedirs(d, exist_ok=True)
    torch.save({"model": model.module.state_dict(), "optim": opt.state_dict(),
                "step": step, "epoch": epoch, "rng": torch.get_rng_state()},
               os.path.join(d, f"rank{rank:02d}.pt"))
    dist.barrier()
    if rank == 0:
        with open(os.path.join(args.out_dir, "latest"), "w") as fh:
            fh.write(os.path.basename(d) + "\n")
        log.info("saved checkpoint %s", d)


def load_checkpoint(args, rank, model, opt):
    d = args.resume
    if d == "auto":
        with open(os.path.join(args.out_dir, "latest")) as fh:
            d = os.path.join(args.out_dir, fh.read().strip())
    path = os.path.join(d, f"rank{rank:02d}.pt")
    log.info("resuming from %s", path)
    st = torch.load(path, map_location="cpu")
    model.module.load_state_dict(st["model"])
    opt.load_state_dict(st["optim"])
    torch.set_rng_state(st["rng"])
    return st["step"], st["epoch"]


def lr_at(step, args, total):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    prog = min(1.0, (step - args.warmup_steps) / max(1, total - args.warmup_steps))
    return args.lr * 0.5 * (1.0 + math.cos(math.pi * prog))


# --------------------------------------------------------------------------- main
@record
def main():
    args = parse_args()
    rank, local_rank, world_size = dist_env()
    setup_logging(rank)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(args.seed)

    if rank == 0:
        log.info("args: %s", json.dumps(vars(args), sort_keys=True))
        log.info("torch %s, python %s", torch.__version__, sys.version.split()[0])
    init_distributed(args, rank, world_size)

    meta = load_meta(args.data_dir)
    model = ResMLP(meta["features"], args.hidden, args.depth, meta["num_classes"], args.dropout)
    model = DDP(model)
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        log.info("model: ResMLP(in=%d, hidden=%d, depth=%d, classes=%d) %.2fM params",
                 meta["features"], args.hidden, args.depth, meta["num_classes"], nparams / 1e6)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    shard = shard_for_rank(meta, rank)
    t0 = time.time()
    x, y = ShardReader(args.data_dir, shard).load()
    log.info("loaded %s: %d rows in %.2fs", shard["file"], x.shape[0], time.time() - t0)
    mean, std = feature_stats(x, args.stats_cache, local_rank)
    x = (x - mean) / std
    n_hold = int(x.shape[0] * args.holdout_frac)
    x_tr, y_tr, x_ev, y_ev = x[n_hold:], y[n_hold:], x[:n_hold], y[:n_hold]

    steps_per_epoch = x_tr.shape[0] // args.batch_size
    total = args.max_steps if args.max_steps > 0 else steps_per_epoch * args.epochs
    step, start_epoch = 0, 0
    if args.resume:
        step, start_epoch = load_checkpoint(args, rank, model, opt)
        if rank == 0:
            log.info("resumed at step %d (epoch %d)", step, start_epoch)
    if rank == 0:
        log.info("training: %d steps/epoch, %d total steps, global batch %d",
                 steps_per_epoch, total, args.batch_size * world_size)

    gen = torch.Generator().manual_seed(args.seed + rank)
    t_log, n_log = time.time(), 0
    for epoch in range(start_epoch, args.epochs if args.max_steps <= 0 else 10**9):
        model.train()
        for xb, yb in batches(x_tr, y_tr, args.batch_size, gen):
            for grp in opt.param_groups:
                grp["lr"] = lr_at(step, args, total)
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            opt.step()
            step += 1
            n_log += xb.shape[0]
            if step % args.log_every == 0:
                lt = loss.detach().clone()
                dist.all_reduce(lt)
                if rank == 0:
                    dt = time.time() - t_log
                    log.info("epoch %d step %d/%d loss %.4f gnorm %.3f lr %.2e | %.0f samples/s",
                             epoch, step, total, lt.item() / world_size, gnorm.item(),
                             opt.param_groups[0]["lr"], n_log * world_size / dt)
                t_log, n_log = time.time(), 0
            if args.save_every and step % args.save_every == 0:
                save_checkpoint(args, rank, model, opt, step, epoch)
            if step >= total:
                break
        # end of epoch: held-out accuracy
        model.eval()
        with torch.no_grad():
            correct = (model(x_ev).argmax(1) == y_ev).sum().float()
            cnt = torch.tensor(float(y_ev.numel()))
        stat = torch.stack([correct, cnt])
        dist.all_reduce(stat)
        if rank == 0:
            log.info("epoch %d done: eval acc %.4f (%d samples)", epoch, (stat[0] / stat[1]).item(),
                     int(stat[1].item()))
        if not args.save_every:
            save_checkpoint(args, rank, model, opt, step, epoch + 1)
        if step >= total:
            break

    if rank == 0:
        log.info("training finished at step %d", step)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
