#!/usr/bin/env python
"""seqcls: train a small transformer sequence classifier with DDP on CPU (gloo).

Rank discovery, in this order:
  * torchrun            -> RANK / LOCAL_RANK / WORLD_SIZE
  * srun (no torchrun)  -> SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS
                           (WORLD_SIZE, when exported by the batch script, wins)
MASTER_ADDR / MASTER_PORT default to the first host of the allocation and a port
derived from the job id, like Lightning's SLURMEnvironment does.
"""
import argparse
import datetime
import gzip
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("seqcls")


# --------------------------------------------------------------------------- args
def parse_args(argv=None):
    p = argparse.ArgumentParser(description="seqcls DDP trainer")
    p.add_argument("--config", default=None, help="JSON file with defaults; command line wins")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--data-format", choices=["shards", "files"], default="shards",
                   help="shards: shard_<rank>.{x,y}.npy per rank; files: one .npy per sample + labels.csv")
    p.add_argument("--out-dir", default="runs/default")
    p.add_argument("--ckpt-dir", default=None, help="default: <out-dir>/ckpt")
    p.add_argument("--sharded-ckpt", action="store_true",
                   help="every rank writes its own model+optimizer shard (ZeRO-style layout)")
    p.add_argument("--resume", choices=["auto", "never"], default="auto")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--ffn", type=int, default=0, help="feed-forward width, default 4*hidden")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--freeze-encoder", action="store_true", help="linear probe: train proj/norm/head only")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--save-every", type=int, default=0, help="steps between checkpoints (0: only at the end)")
    p.add_argument("--compress-ckpt", action="store_true", help="gzip the checkpoint (saves quota)")
    p.add_argument("--keep-copies", action="store_true", help="also keep a step_<N>.pt copy of every checkpoint")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dist-timeout", type=int, default=60, help="seconds, for rendezvous and collectives")
    p.add_argument("--requeue-on-usr1", action="store_true",
                   help="on SIGUSR1: checkpoint, then `scontrol requeue` the job (pre-emption friendly)")
    p.add_argument("--log-all-ranks", action="store_true")
    args, _ = p.parse_known_args(argv)
    if args.config:
        with open(args.config) as f:
            cfg = json.load(f)
        p.set_defaults(**{k.replace("-", "_"): v for k, v in cfg.items()})
    args = p.parse_args(argv)
    if not args.data_dir:
        p.error("--data-dir is required (or set data_dir in --config)")
    if args.ckpt_dir is None:
        args.ckpt_dir = os.path.join(args.out_dir, "ckpt")
    return args


# --------------------------------------------------------------------------- distributed env
def _first_slurm_host():
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        return "127.0.0.1"
    out = subprocess.check_output(["scontrol", "show", "hostnames", nodelist], text=True)
    return out.split()[0]


def get_dist_env():
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        env = dict(rank=int(os.environ["RANK"]), local_rank=int(os.environ["LOCAL_RANK"]),
                   world_size=int(os.environ["WORLD_SIZE"]), launcher="torchrun")
    elif "SLURM_PROCID" in os.environ and "SLURM_STEP_ID" in os.environ:
        env = dict(rank=int(os.environ["SLURM_PROCID"]), local_rank=int(os.environ.get("SLURM_LOCALID", 0)),
                   world_size=int(os.environ.get("WORLD_SIZE") or os.environ["SLURM_NTASKS"]),
                   launcher="srun")
        os.environ.setdefault("MASTER_ADDR", _first_slurm_host())
        os.environ.setdefault("MASTER_PORT", str(15000 + int(os.environ["SLURM_JOB_ID"]) % 20000))
    else:
        env = dict(rank=0, local_rank=0, world_size=1, launcher="local")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
    env["host"] = socket.gethostname().split(".")[0]
    return env


def setup_logging(env, all_ranks=False):
    fmt = (f"%(asctime)s [{env['host']}:r{env['rank']}/{env['world_size']}] "
           "%(levelname).1s %(name)s| %(message)s")
    h = logging.StreamHandler(sys.stdout)
    h.setFormatter(logging.Formatter(fmt, datefmt="%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(logging.INFO if (env["rank"] == 0 or all_ranks) else logging.WARNING)


def init_distributed(env, timeout_s):
    if env["world_size"] == 1:
        return
    log.info("init_process_group(gloo) world_size=%d master=%s:%s timeout=%ds", env["world_size"],
             os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], timeout_s)
    t0 = time.time()
    dist.init_process_group("gloo", init_method="env://", rank=env["rank"], world_size=env["world_size"],
                            timeout=datetime.timedelta(seconds=timeout_s))
    log.info("process group ready after %.1fs", time.time() - t0)


def is_dist():
    return dist.is_available() and dist.is_initialized()


def barrier():
    if is_dist():
        dist.barrier()


# --------------------------------------------------------------------------- data
def read_meta(data_dir):
    with open(os.path.join(data_dir, "meta.json")) as f:
        return json.load(f)


class ShardDataset(Dataset):
    """Pre-processed features, one shard per rank: shard_<rank>.x.npy (N,T,F) float32 and .y.npy (N,)."""

    def __init__(self, data_dir, rank):
        stem = os.path.join(data_dir, f"shard_{rank:05d}")
        self.x = np.load(stem + ".x.npy", mmap_mode="r")
        self.y = np.load(stem + ".y.npy", mmap_mode="r")
        if len(self.x) != len(self.y):
            raise ValueError(f"{stem}: {len(self.x)} feature rows but {len(self.y)} labels")

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return torch.from_numpy(np.array(self.x[i], dtype=np.float32)), int(self.y[i])


class FileDataset(Dataset):
    """One .npy file per sample, labels in labels.csv (name,label); files dealt round-robin to ranks."""

    def __init__(self, data_dir, rank, world_size):
        rows = []
        with open(os.path.join(data_dir, "labels.csv")) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    name, label = line.split(",")
                    rows.append((name, int(label)))
        rows.sort()
        self.items = [(os.path.join(data_dir, n), l) for n, l in rows[rank::world_size]]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        x = np.load(path)
        return torch.from_numpy(x.astype(np.float32)), label


def build_dataset(args, env):
    if args.data_format == "shards":
        return ShardDataset(args.data_dir, env["rank"])
    return FileDataset(args.data_dir, env["rank"], env["world_size"])


# --------------------------------------------------------------------------- model
class SeqClassifier(nn.Module):
    def __init__(self, in_dim, hidden, heads, layers, ffn, num_classes, dropout):
        super().__init__()
        self.proj = nn.Linear(in_dim, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn or 4 * hidden, dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        h = self.encoder(self.proj(x))
        return self.head(self.norm(h.mean(dim=1)))


# --------------------------------------------------------------------------- checkpoints
def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ckpt_path(args, env):
    if args.sharded_ckpt:
        return os.path.join(args.ckpt_dir, f"rank_{env['rank']:02d}", "last.pt")
    return os.path.join(args.ckpt_dir, "last.pt.gz" if args.compress_ckpt else "last.pt")


def save_checkpoint(args, env, model, opt, step, epoch):
    path = ckpt_path(args, env)
    state = {"model": model.module.state_dict() if isinstance(model, DDP) else model.state_dict(),
             "optimizer": opt.state_dict(), "step": step, "epoch": epoch,
             "world_size": env["world_size"], "args": vars(args)}
    t0 = time.time()
    if args.sharded_ckpt:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, path)
        log.info("saved shard %s (step %d, %.1fs)", path, step, time.time() - t0)
    elif env["rank"] == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        log.info("saving checkpoint to %s (step %d)", path, step)
        if args.compress_ckpt:
            with gzip.open(path, "wb", compresslevel=6) as f:
                torch.save(state, f)
        else:
            torch.save(state, path)
        _fsync(path)
        if args.keep_copies:
            base = os.path.basename(path).replace("last", f"step_{step:06d}")
            shutil.copyfile(path, os.path.join(os.path.dirname(path), base))
        log.info("checkpoint saved: %s (%.0f MB, %.1fs)", path, os.path.getsize(path) / 2**20, time.time() - t0)
    barrier()


def maybe_resume(args, env, model, opt):
    path = ckpt_path(args, env)
    if args.resume != "auto" or not os.path.exists(path):
        return 0, 0
    log.info("found %s, resuming", path)
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            state = torch.load(f, map_location="cpu")
    else:
        state = torch.load(path, map_location="cpu")
    (model.module if isinstance(model, DDP) else model).load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    log.info("resumed at step %d epoch %d", state["step"], state["epoch"])
    return state["step"], state["epoch"]


# --------------------------------------------------------------------------- pre-emption
_STOP = {"signum": None}


def _on_usr1(signum, frame):
    _STOP["signum"] = signum


def stop_requested():
    flag = torch.tensor([1.0 if _STOP["signum"] is not None else 0.0])
    if is_dist():
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def requeue_self():
    job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if job else os.environ["SLURM_JOB_ID"]
    log.info("requeueing job %s", job)
    subprocess.run(["scontrol", "requeue", job], check=True)


# --------------------------------------------------------------------------- train
def train(args, env, model, opt, loader, start_step, start_epoch):
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        log.warning("no full batch of %d on this rank (%d samples), skipping the training loop",
                    args.batch_size, len(loader.dataset))
        return start_step
    step = start_step
    t_last, seen = time.time(), 0
    for epoch in range(start_epoch, args.epochs):
        loader.generator.manual_seed(args.seed + 1000 * epoch + env["rank"])
        model.train()
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step} (epoch {epoch}), stopping")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            seen += len(y)
            if step % args.log_every == 0:
                dt = time.time() - t_last
                log.info("epoch %d step %d loss %.4f gnorm %.3f lr %.1e | %.0f samples/s", epoch, step,
                         loss.item(), gnorm.item(), opt.param_groups[0]["lr"], seen * env["world_size"] / dt)
                t_last, seen = time.time(), 0
            if args.requeue_on_usr1 and stop_requested():
                log.warning("SIGUSR1 received at step %d: checkpointing before the job is stopped", step)
                save_checkpoint(args, env, model, opt, step, epoch)
                if env["rank"] == 0:
                    requeue_self()
                barrier()
                return -1
            if args.save_every and step % args.save_every == 0:
                save_checkpoint(args, env, model, opt, step, epoch)
            if args.max_steps and step >= args.max_steps:
                return step
    return step


def main():
    args = parse_args()
    env = get_dist_env()
    setup_logging(env, args.log_all_ranks)
    log.info("seqcls | host=%s pid=%d launcher=%s rank=%d local_rank=%d world_size=%d", env["host"], os.getpid(),
             env["launcher"], env["rank"], env["local_rank"], env["world_size"])
    log.info("torch %s | job %s step %s array %s restart %s", torch.__version__, os.environ.get("SLURM_JOB_ID"),
             os.environ.get("SLURM_STEP_ID"), os.environ.get("SLURM_ARRAY_TASK_ID", "-"),
             os.environ.get("SLURM_RESTART_COUNT", "0"))
    log.info("config: %s", json.dumps({k: v for k, v in vars(args).items()}, sort_keys=True))
    torch.manual_seed(args.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.requeue_on_usr1:
        signal.signal(signal.SIGUSR1, _on_usr1)

    meta = read_meta(args.data_dir)
    dataset = build_dataset(args, env)
    log.info("dataset: %s, %d samples on rank %d", args.data_dir, len(dataset), env["rank"])

    init_distributed(env, args.dist_timeout)

    model = SeqClassifier(meta["feat_dim"], args.hidden, args.heads, args.layers, args.ffn,
                          meta["num_classes"], args.dropout)
    if args.freeze_encoder:
        model.encoder.requires_grad_(False)
    n_params = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("model: %.2fM parameters (%.2fM trainable)", n_params / 1e6, n_train / 1e6)
    if is_dist():
        model = DDP(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                            weight_decay=args.weight_decay)
    start_step, start_epoch = maybe_resume(args, env, model, opt)

    gen = torch.Generator()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        num_workers=args.num_workers, generator=gen,
                        persistent_workers=args.num_workers > 0)
    log.info("training: %d steps/epoch, epochs=%d max_steps=%d", len(loader), args.epochs, args.max_steps)
    step = train(args, env, model, opt, loader, start_step, start_epoch)
    if step < 0:
        log.info("stopped for requeue")
        return 0

    barrier()  # everybody done before the final checkpoint
    save_checkpoint(args, env, model, opt, step, args.epochs)
    log.info("done: %d steps", step)
    if is_dist():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
