#!/usr/bin/env python3
"""Train a small decoder-only transformer LM on tokenized JSONL shards.

Launch with torchrun (``torchrun --nproc-per-node=N trainer.py ...``) or let the script
start its own workers with ``--spawn-workers N``.

Environment:
  JOB_END_TIME   optional unix timestamp (set by the scheduler); when the job is about to
                 run out of time the trainer writes a checkpoint and exits cleanly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import socket
import sys
import time
from datetime import timedelta
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from data import IGNORE_INDEX, JsonlShardDataset, collate_batch, list_shards, shards_for_rank
from model import ModelConfig, TransformerLM

logger = logging.getLogger("nanolm.train")

LOG_FORMAT = "%(asctime)s | %(levelname)-7s | rank %(rank)s | %(name)s | %(message)s"


# --------------------------------------------------------------------------------------
# logging
# --------------------------------------------------------------------------------------
class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


def setup_logging(rank: int, log_dir: str | None, all_ranks_console: bool, debug: bool) -> None:
    root = logging.getLogger("nanolm")
    root.handlers.clear()
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False
    fmt = logging.Formatter(LOG_FORMAT)
    rank_filter = _RankFilter(rank)

    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(fmt)
    console.addFilter(rank_filter)
    console.setLevel(logging.INFO if (rank == 0 or all_ranks_console) else logging.WARNING)
    root.addHandler(console)

    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(log_dir, f"rank{rank}.log"), mode="a")
        fh.setFormatter(fmt)
        fh.addFilter(rank_filter)
        root.addHandler(fh)


# --------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", default="data")
    g.add_argument("--max-seq-len", type=int, default=256, help="truncate documents to this many tokens (0: no limit)")
    g.add_argument("--num-workers", type=int, default=2)

    g = p.add_argument_group("model")
    g.add_argument("--model-config", default=None, help="JSON file with ModelConfig fields")
    g.add_argument("--vocab-size", type=int, default=None)
    g.add_argument("--d-model", type=int, default=None)
    g.add_argument("--n-layers", type=int, default=None)
    g.add_argument("--n-heads", type=int, default=None)
    g.add_argument("--attn-impl", choices=["eager", "sdpa"], default=None)

    g = p.add_argument_group("optimization")
    g.add_argument("--optimizer", choices=["adamw", "fused_lamb", "lion"], default="adamw")
    g.add_argument("--lr", type=float, default=3e-3)
    g.add_argument("--min-lr", type=float, default=3e-4)
    g.add_argument("--warmup-steps", type=int, default=10)
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--micro-batch-size", type=int, default=4)
    g.add_argument("--global-batch-size", type=int, default=16)
    g.add_argument("--max-steps", type=int, default=60)
    g.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    g.add_argument("--seed", type=int, default=1234)

    g = p.add_argument_group("distributed")
    g.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp", help="DDP or FSDP2 (fully_shard)")
    g.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    g.add_argument("--dist-timeout-s", type=int, default=60)
    g.add_argument("--spawn-workers", type=int, default=0,
                   help="start N local workers with torch.multiprocessing.spawn instead of using torchrun")
    g.add_argument("--master-port", type=int, default=None, help="rendezvous port for --spawn-workers")

    g = p.add_argument_group("eval / logging / checkpointing")
    g.add_argument("--eval-every", type=int, default=20)
    g.add_argument("--sample-every", type=int, default=0, help="generate a sample from rank 0 every N steps")
    g.add_argument("--log-every", type=int, default=1)
    g.add_argument("--log-dir", default=None, help="also write logs to LOG_DIR/rank{RANK}.log")
    g.add_argument("--log-all-ranks", action="store_true", help="INFO logs from every rank on the console")
    g.add_argument("--debug", action="store_true")
    g.add_argument("--ckpt-dir", default="checkpoints")
    g.add_argument("--save-every", type=int, default=0)
    g.add_argument("--resume", default="none", help="'none', 'auto' (latest in --ckpt-dir) or a checkpoint dir")
    g.add_argument("--exit-margin-s", type=float, default=10.0,
                   help="checkpoint and exit this many seconds before JOB_END_TIME")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def build_model_config(args) -> ModelConfig:
    cfg = ModelConfig.from_json(args.model_config) if args.model_config else ModelConfig()
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "attn_impl"):
        val = getattr(args, name)
        if val is not None:
            setattr(cfg, name, val)
    return cfg


def build_optimizer(model: torch.nn.Module, args) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if args.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if args.optimizer == "fused_lamb":
        from apex.optimizers import FusedLAMB  # optional dependency

        return FusedLAMB(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if args.optimizer == "lion":
        from lion_pytorch import Lion  # optional dependency

        return Lion(groups, lr=args.lr, betas=(0.9, 0.99))
    raise ValueError(f"unknown optimizer {args.optimizer!r}")


def lr_at(step: int, args) -> float:
    if step <= args.warmup_steps:
        return args.lr * step / max(1, args.warmup_steps)
    progress = (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * progress))


def _is_dtensor(t) -> bool:
    return hasattr(t, "to_local") and hasattr(t, "device_mesh")


def _localize(obj):
    """Map DTensors (FSDP2 shards) to their local shards so every rank saves a plain file."""
    if _is_dtensor(obj):
        return obj.to_local().detach().clone()
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _localize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_localize(v) for v in obj)
    return obj


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DDP) else model


def _acquire_lock(path: str, poll_s: float = 0.5) -> None:
    """Simple cross-process lock on a shared filesystem (O_EXCL create)."""
    waited = 0.0
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if waited == 0.0:
                logger.debug("waiting for lock %s", path)
            time.sleep(poll_s)
            waited += poll_s
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        return


def _release_lock(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def save_checkpoint(model, optimizer, step: int, args, rank: int) -> str:
    ckpt = os.path.join(args.ckpt_dir, f"step_{step:08d}")
    os.makedirs(ckpt, exist_ok=True)
    state = {
        "step": step,
        "model": _localize(unwrap(model).state_dict()),
        "optimizer": _localize(optimizer.state_dict()),
        "rng": torch.get_rng_state(),
        "args": {k: v for k, v in vars(args).items()},
    }
    tmp = os.path.join(ckpt, f".rank{rank}.pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, os.path.join(ckpt, f"rank{rank}.pt"))
    logger.info("saved checkpoint shard %s", os.path.join(ckpt, f"rank{rank}.pt"))
    if rank == 0:
        lock = os.path.join(args.ckpt_dir, ".latest.lock")
        _acquire_lock(lock)
        try:
            with open(os.path.join(args.ckpt_dir, "latest.tmp"), "w") as f:
                f.write(os.path.basename(ckpt) + "\n")
            os.replace(os.path.join(args.ckpt_dir, "latest.tmp"), os.path.join(args.ckpt_dir, "latest"))
        finally:
            _release_lock(lock)
    return ckpt


def resolve_resume_dir(args) -> str | None:
    if args.resume == "none":
        return None
    if args.resume != "auto":
        return args.resume
    latest = os.path.join(args.ckpt_dir, "latest")
    if not os.path.exists(latest):
        logger.info("no checkpoint found in %s, starting from scratch", args.ckpt_dir)
        return None
    with open(latest) as f:
        return os.path.join(args.ckpt_dir, f.read().strip())


def load_checkpoint(model, optimizer, ckpt_dir: str, rank: int, device) -> int:
    path = os.path.join(ckpt_dir, f"rank{rank}.pt")
    logger.info("resuming from %s", path)
    state = torch.load(path, map_location=device, weights_only=True)
    raw = unwrap(model)
    with torch.no_grad():
        for name, t in raw.state_dict().items():
            src = state["model"][name]
            (t.to_local() if _is_dtensor(t) else t).copy_(src)
    optimizer.load_state_dict(state["optimizer"])
    params = {id(p): p for group in optimizer.param_groups for p in group["params"]}
    for pid, p in params.items():
        if _is_dtensor(p) and p in optimizer.state:
            from torch.distributed.tensor import DTensor

            st = optimizer.state[p]
            for k, v in list(st.items()):
                if isinstance(v, torch.Tensor) and not _is_dtensor(v) and v.dim() > 0:
                    st[k] = DTensor.from_local(v, p.device_mesh, p.placements, run_check=False)
    torch.set_rng_state(state["rng"].cpu())
    return int(state["step"])


@torch.no_grad()
def evaluate(model, loader, device, autocast_ctx) -> tuple[float, int]:
    model.eval()
    totals = torch.zeros(2, device=device, dtype=torch.float64)
    n_batches = 0
    for batch in loader:
        inputs = batch["input_ids"].to(device, non_blocking=True)
        labels = batch["labels"].to(device, non_blocking=True)
        with autocast_ctx():
            logits = model(inputs)
        loss_sum = F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1),
                                   ignore_index=IGNORE_INDEX, reduction="sum")
        stats = torch.stack([loss_sum.double(), (labels != IGNORE_INDEX).sum().double()])
        dist.all_reduce(stats)
        totals += stats
        n_batches += 1
    model.train()
    val_loss = (totals[0] / totals[1].clamp_min(1)).item()
    return val_loss, n_batches


def sample(model, device, max_new_tokens: int = 24) -> list[int]:
    prompt = torch.tensor([[1]], dtype=torch.long, device=device)
    model.eval()
    out = model.generate(prompt, max_new_tokens=max_new_tokens, temperature=0.8)
    model.train()
    return out[0].tolist()


def infinite_batches(loader):
    epoch = 0
    while True:
        for batch in loader:
            yield batch
        epoch += 1
        logger.info("finished pass %d over local shard(s)", epoch)


# --------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------
def train(args) -> None:
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    setup_logging(rank, args.log_dir, args.log_all_ranks, args.debug)

    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    init_kwargs = {"backend": backend, "timeout": timedelta(seconds=args.dist_timeout_s)}
    if backend == "nccl":
        init_kwargs["device_id"] = device
    dist.init_process_group(**init_kwargs)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    is_main = rank == 0

    model_cfg = build_model_config(args)
    if is_main:
        run_info = {
            "hostname": socket.gethostname(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "backend": backend,
            "device": str(device),
            "world_size": world_size,
        }
        dump = {"run": run_info, "args": vars(args), "model": model_cfg.to_dict()}
        logger.info("configuration:\n%s", json.dumps(dump, indent=2, sort_keys=False))

    per_step = args.micro_batch_size * world_size
    if args.global_batch_size % per_step != 0:
        raise ValueError(
            f"global_batch_size ({args.global_batch_size}) must be divisible by "
            f"micro_batch_size * world_size ({args.micro_batch_size} * {world_size} = {per_step})"
        )
    grad_accum = args.global_batch_size // per_step

    torch.manual_seed(args.seed)
    if use_cuda:
        torch.cuda.manual_seed(args.seed)

    # ---- data
    train_shards = shards_for_rank(list_shards(args.data_dir, "train"), rank, world_size)
    val_shards = shards_for_rank(list_shards(args.data_dir, "val"), rank, world_size)
    train_ds = JsonlShardDataset(train_shards)
    val_ds = JsonlShardDataset(val_shards)
    logger.info("local data: %d train docs from %s, %d val docs from %s", len(train_ds),
                [os.path.basename(p) for p in train_shards], len(val_ds),
                [os.path.basename(p) for p in val_shards])
    collate = partial(collate_batch, max_seq_len=args.max_seq_len)
    train_loader = DataLoader(train_ds, batch_size=args.micro_batch_size, shuffle=False, drop_last=True,
                              num_workers=args.num_workers, collate_fn=collate, pin_memory=use_cuda,
                              persistent_workers=args.num_workers > 0)
    val_loader = DataLoader(val_ds, batch_size=args.micro_batch_size, shuffle=False, drop_last=False,
                            num_workers=0, collate_fn=collate)

    # ---- model
    model = TransformerLM(model_cfg).to(device)
    logger.info("model: %.2fM parameters, %d layers, d_model=%d, heads=%d, attn=%s",
                model.num_params() / 1e6, model_cfg.n_layers, model_cfg.d_model, model_cfg.n_heads,
                model_cfg.attn_impl)
    bf16 = args.precision == "bf16"
    if args.parallel == "ddp":
        model = DDP(model, device_ids=[local_rank] if use_cuda else None)
        autocast_ctx = partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16, enabled=bf16)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        for block in model.blocks:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        autocast_ctx = contextlib.nullcontext
    logger.info("wrapped model with %s (grad_accum=%d, micro_batch=%d, global_batch=%d)",
                "DistributedDataParallel" if args.parallel == "ddp" else "FSDP2 fully_shard",
                grad_accum, args.micro_batch_size, args.global_batch_size)

    optimizer = build_optimizer(model, args)

    start_step = 0
    resume_dir = resolve_resume_dir(args)
    if resume_dir:
        start_step = load_checkpoint(model, optimizer, resume_dir, rank, device)
        logger.info("resumed at step %d", start_step)

    job_end = float(os.environ["JOB_END_TIME"]) if os.environ.get("JOB_END_TIME") else None

    # ---- loop
    model.train()
    batches = infinite_batches(train_loader)
    vocab = model_cfg.vocab_size
    tokens_since = 0
    t_log = time.perf_counter()
    logger.info("starting training at step %d / %d", start_step, args.max_steps)
    for step in range(start_step + 1, args.max_steps + 1):
        t0 = time.perf_counter()
        lr = lr_at(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr

        loss_acc = torch.zeros((), device=device)
        for micro in range(grad_accum):
            batch = next(batches)
            inputs = batch["input_ids"].to(device, non_blocking=True)
            labels = batch["labels"].to(device, non_blocking=True)
            last = micro == grad_accum - 1
            if args.parallel == "ddp":
                sync_ctx = contextlib.nullcontext() if last else model.no_sync()
            else:
                model.set_requires_gradient_sync(last)
                sync_ctx = contextlib.nullcontext()
            with sync_ctx:
                with autocast_ctx():
                    logits = model(inputs)
                loss = F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1), ignore_index=IGNORE_INDEX)
                (loss / grad_accum).backward()
            loss_acc += loss.detach() / grad_accum
            tokens_since += int((labels != IGNORE_INDEX).sum())

        loss_val = loss_acc.item()
        if not math.isfinite(loss_val):
            raise FloatingPointError(f"loss is {loss_val} at step {step}; refusing to apply the update")

        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        if _is_dtensor(gnorm):
            gnorm = gnorm.full_tensor()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % args.log_every == 0:
            now = time.perf_counter()
            tps = tokens_since * world_size / max(now - t_log, 1e-9)
            mem = f" | mem {torch.cuda.max_memory_allocated() / 2**30:.2f}GiB" if use_cuda else ""
            logger.info("step %5d/%d | loss %.4f | lr %.3e | gnorm %.3f | tok/s %s%s | %.0fms",
                        step, args.max_steps, loss_val, lr, float(gnorm), f"{tps:,.0f}", mem,
                        (now - t0) * 1000)
            tokens_since, t_log = 0, now

        if args.eval_every and step % args.eval_every == 0:
            t_eval = time.perf_counter()
            val_loss, n_batches = evaluate(model, val_loader, device, autocast_ctx)
            logger.info("eval  step %5d | val_loss %.4f | val_ppl %.2f | %d local batches | %.1fs",
                        step, val_loss, math.exp(min(val_loss, 20.0)), n_batches, time.perf_counter() - t_eval)

        if args.sample_every and step % args.sample_every == 0 and is_main:
            ids = sample(model, device)
            logger.info("sample @ step %d: %s", step, " ".join(map(str, ids)))

        if args.save_every and step % args.save_every == 0:
            save_checkpoint(model, optimizer, step, args, rank)

        if job_end is not None and time.time() >= job_end - args.exit_margin_s:
            logger.info("step %d: job ends in %.0fs, writing checkpoint and exiting", step, job_end - time.time())
            save_checkpoint(model, optimizer, step, args, rank)
            sys.exit(0)

    logger.info("training finished after %d steps", args.max_steps)
    if args.save_every and args.max_steps % args.save_every != 0:
        save_checkpoint(model, optimizer, args.max_steps, args, rank)
    dist.destroy_process_group()


def _spawn_entry(local_rank: int, args, nprocs: int) -> None:
    os.environ["RANK"] = str(local_rank)
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["WORLD_SIZE"] = str(nprocs)
    os.environ["LOCAL_WORLD_SIZE"] = str(nprocs)
    train(args)


@record
def main(argv=None) -> None:
    args = parse_args(argv)
    if args.spawn_workers > 0:
        import torch.multiprocessing as mp

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if args.master_port is not None:
            os.environ["MASTER_PORT"] = str(args.master_port)
        os.environ.setdefault("MASTER_PORT", "29500")
        mp.spawn(_spawn_entry, args=(args, args.spawn_workers), nprocs=args.spawn_workers, join=True)
    else:
        train(args)


if __name__ == "__main__":
    main()
