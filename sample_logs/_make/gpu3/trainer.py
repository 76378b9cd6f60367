#!/usr/bin/env python3
"""Pretrain a small GPT-style decoder on mock data.

Megatron-flavoured: argument groups, hand-written tensor parallel layers
(parallel.py), DDP or FSDP2 for data parallelism, bf16 autocast or pure-bf16
parameters, gradient accumulation, periodic evaluation and checkpointing.

Launch with torchrun (one process per GPU) or with ``--launcher spawn``, which
forks the workers itself via torch.multiprocessing.spawn.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import json
import logging
import math
import os
import platform
import random
import socket
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import checkpointing
import data as data_mod
import parallel as mpu
from gpt_model import GPTModel, num_parameters

logger = logging.getLogger("lm.train")


# =============================================================================
# arguments
# =============================================================================
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="GPT pretraining (mock data)", allow_abbrev=False)

    g = parser.add_argument_group(title="network size")
    g.add_argument("--num-layers", type=int, default=2)
    g.add_argument("--hidden-size", type=int, default=128)
    g.add_argument("--ffn-hidden-size", type=int, default=None)
    g.add_argument("--num-attention-heads", type=int, default=4)
    g.add_argument("--num-query-groups", type=int, default=None)
    g.add_argument("--seq-length", type=int, default=128)
    g.add_argument("--max-seq-length", type=int, default=None,
                   help="longest sample allowed without packing (defaults to --seq-length)")
    g.add_argument("--vocab-size", type=int, default=4096)
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    g.add_argument("--swiglu", action="store_true")
    g.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear")
    g.add_argument("--norm-epsilon", type=float, default=1e-5)
    g.add_argument("--rotary-base", type=float, default=10000.0)
    g.add_argument("--init-method-std", type=float, default=0.02)
    g.add_argument("--attention-impl", choices=["sdpa", "eager"], default="sdpa")

    g = parser.add_argument_group(title="training")
    g.add_argument("--micro-batch-size", type=int, default=4)
    g.add_argument("--global-batch-size", type=int, default=None)
    g.add_argument("--train-iters", type=int, default=None)
    g.add_argument("--train-epochs", type=int, default=None)
    g.add_argument("--lr", type=float, default=3e-4)
    g.add_argument("--min-lr", type=float, default=3e-5)
    g.add_argument("--lr-warmup-iters", type=int, default=10)
    g.add_argument("--lr-decay-style", choices=["cosine", "linear", "constant"], default="cosine")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--adam-beta1", type=float, default=0.9)
    g.add_argument("--adam-beta2", type=float, default=0.95)
    g.add_argument("--adam-eps", type=float, default=1e-8)
    g.add_argument("--adam-fused", action="store_true", help="use the fused (single kernel) AdamW")
    g.add_argument("--clip-grad", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--ema-decay", type=float, default=0.0, help="keep an EMA of the weights (main process)")

    g = parser.add_argument_group(title="mixed precision")
    g.add_argument("--no-bf16", action="store_false", dest="bf16", help="disable bf16 autocast")
    g.add_argument("--params-dtype", choices=["fp32", "bf16"], default="fp32",
                   help="bf16 = keep parameters in bf16 (no autocast)")

    g = parser.add_argument_group(title="distributed")
    g.add_argument("--tensor-model-parallel-size", type=int, default=1)
    g.add_argument("--data-parallel-wrapper", choices=["ddp", "fsdp2"], default="ddp")
    g.add_argument("--ddp-bucket-size-mb", type=int, default=25)
    g.add_argument("--distributed-timeout-seconds", type=int, default=600)
    g.add_argument("--launcher", choices=["torchrun", "spawn"], default="torchrun")
    g.add_argument("--nproc-per-node", type=int, default=None, help="workers to spawn (--launcher spawn)")
    g.add_argument("--master-addr", default="127.0.0.1")
    g.add_argument("--master-port", type=int, default=29500)
    g.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")

    g = parser.add_argument_group(title="data")
    g.add_argument("--data-impl", choices=["mmap", "preload"], default="mmap")
    g.add_argument("--data-cache-dir", default="./data_cache")
    g.add_argument("--data-seed", type=int, default=42)
    g.add_argument("--mock-num-docs", type=int, default=2000)
    g.add_argument("--mock-doc-len-median", type=float, default=300)
    g.add_argument("--mock-doc-len-sigma", type=float, default=0.6)
    g.add_argument("--mock-doc-len-min", type=int, default=8)
    g.add_argument("--mock-doc-len-max", type=int, default=4096)
    g.add_argument("--no-packing", action="store_false", dest="packing",
                   help="one document per sample, padded to the longest sample of the batch")
    g.add_argument("--data-sharding", choices=["sample", "document"], default="sample")
    g.add_argument("--pad-token-id", type=int, default=None)
    g.add_argument("--num-workers", type=int, default=2)
    g.add_argument("--val-samples", type=int, default=1024)

    g = parser.add_argument_group(title="validation")
    g.add_argument("--eval-interval", type=int, default=50)
    g.add_argument("--eval-iters", type=int, default=8, help="-1: the whole validation set")
    g.add_argument("--eval-micro-batch-size", type=int, default=None)
    g.add_argument("--eval-main-process-only", action="store_true")

    g = parser.add_argument_group(title="compilation")
    g.add_argument("--compile", action="store_true", help="torch.compile the training model")
    g.add_argument("--compile-eval", action="store_true", help="torch.compile the evaluation forward")
    g.add_argument("--compile-mode", default="default")

    g = parser.add_argument_group(title="checkpointing")
    g.add_argument("--save", default=None)
    g.add_argument("--load", default=None)
    g.add_argument("--save-interval", type=int, default=None)
    g.add_argument("--ckpt-format", choices=["torch", "torch_dist"], default="torch")
    g.add_argument("--async-save", action="store_true")

    g = parser.add_argument_group(title="logging")
    g.add_argument("--log-interval", type=int, default=1)
    g.add_argument("--log-dir", default=None, help="also write logs/rank{RANK}.log files")
    g.add_argument("--metrics-jsonl", default=None)
    g.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def validate_args(args):
    args.world_size = dist.get_world_size()
    args.rank = dist.get_rank()
    tp = args.tensor_model_parallel_size
    args.data_parallel_size = mpu.get_data_parallel_world_size()
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * args.data_parallel_size
    assert args.global_batch_size % (args.micro_batch_size * args.data_parallel_size) == 0, \
        "global batch size ({}) is not divisible by micro batch size ({}) times data parallel size ({})".format(
            args.global_batch_size, args.micro_batch_size, args.data_parallel_size)
    args.grad_accum_steps = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
    if args.ffn_hidden_size is None:
        args.ffn_hidden_size = 4 * args.hidden_size
    if args.num_query_groups is None:
        args.num_query_groups = args.num_attention_heads
    if args.max_seq_length is None:
        args.max_seq_length = args.seq_length
    assert args.hidden_size % args.num_attention_heads == 0, "hidden size must be divisible by attention heads"
    assert (args.train_iters is None) != (args.train_epochs is None), "set exactly one of --train-iters/--train-epochs"
    if args.data_parallel_wrapper == "fsdp2":
        assert tp == 1, "FSDP2 path does not support tensor parallelism"
        assert args.ckpt_format == "torch_dist", "FSDP2 requires --ckpt-format torch_dist"
    multiple = args.make_vocab_size_divisible_by * tp
    args.padded_vocab_size = int(math.ceil(args.vocab_size / multiple) * multiple)
    if args.rank == 0:
        print(" > padded vocab (size: {}) with {} dummy tokens (new size: {})".format(
            args.vocab_size, args.padded_vocab_size - args.vocab_size, args.padded_vocab_size), flush=True)
    return args


def print_arguments(args):
    print("------------------------ arguments ------------------------", flush=True)
    lines = []
    for arg in vars(args):
        dots = "." * (48 - len(arg))
        lines.append("  {} {} {}".format(arg, dots, getattr(args, arg)))
    for line in sorted(lines, key=lambda x: x.lower()):
        print(line, flush=True)
    print("-------------------- end of arguments ---------------------", flush=True)


# =============================================================================
# logging
# =============================================================================
class _RankFilter(logging.Filter):
    def __init__(self, rank, world_size):
        super().__init__()
        self.rank = rank
        self.world_size = world_size

    def filter(self, record):
        record.rank = self.rank
        record.world_size = self.world_size
        return True


def setup_logging(args, rank, world_size):
    fmt = logging.Formatter("%(asctime)s.%(msecs)03d | %(levelname)-7s | rank %(rank)s/%(world_size)s | "
                            "%(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    root = logging.getLogger("lm")
    root.setLevel(args.log_level.upper())
    root.propagate = False
    for h in list(root.handlers):
        root.removeHandler(h)
    rank_filter = _RankFilter(rank, world_size)
    stream = logging.StreamHandler(sys.stdout)
    stream.setFormatter(fmt)
    stream.addFilter(rank_filter)
    root.addHandler(stream)
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(args.log_dir, "rank{}.log".format(rank)), mode="a")
        fh.setFormatter(fmt)
        fh.addFilter(rank_filter)
        root.addHandler(fh)


def _die_on_thread_exception(hook_args):
    """A background thread (checkpoint writer, metrics uploader, ...) must not
    die silently while training goes on: print it and take the process down."""
    threading.__excepthook__(hook_args)
    name = hook_args.thread.name if hook_args.thread is not None else "?"
    logger.critical("background thread %r died with %s; terminating process %d", name,
                    hook_args.exc_type.__name__, os.getpid())
    for h in logging.getLogger("lm").handlers:
        h.flush()
    sys.stderr.flush()
    os._exit(1)


# =============================================================================
# helpers
# =============================================================================
class OptimizerParamScheduler:
    def __init__(self, optimizer, max_lr, min_lr, warmup_iters, decay_iters, style):
        self.optimizer = optimizer
        self.max_lr, self.min_lr = max_lr, min_lr
        self.warmup_iters, self.decay_iters = warmup_iters, max(decay_iters, 1)
        self.style = style
        self.num_steps = 0
        self.step(0)

    def get_lr(self):
        n = self.num_steps
        if self.warmup_iters > 0 and n <= self.warmup_iters:
            return self.max_lr * n / self.warmup_iters
        if self.style == "constant":
            return self.max_lr
        ratio = min(1.0, (n - self.warmup_iters) / max(1, self.decay_iters - self.warmup_iters))
        if self.style == "linear":
            coeff = 1.0 - ratio
        else:
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return self.min_lr + coeff * (self.max_lr - self.min_lr)

    def step(self, increment=1):
        self.num_steps += increment
        lr = self.get_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def state_dict(self):
        return {"num_steps": self.num_steps, "max_lr": self.max_lr, "min_lr": self.min_lr,
                "warmup_iters": self.warmup_iters, "decay_iters": self.decay_iters, "style": self.style}

    def load_state_dict(self, sd):
        self.num_steps = sd["num_steps"]
        self.step(0)


class ModelEMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = {n: p.detach().clone().float() for n, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model):
        for n, p in model.named_parameters():
            self.shadow[n].mul_(self.decay).add_(p.detach().float(), alpha=1.0 - self.decay)

    def state_dict(self):
        return {"decay": self.decay, "shadow": self.shadow}

    def load_state_dict(self, sd):
        self.decay = sd["decay"]
        for n, t in sd["shadow"].items():
            self.shadow[n].copy_(t)


def report_memory(name):
    mb = 1024 * 1024
    s = "memory (MB) | allocated: {:.1f} | max allocated: {:.1f} | reserved: {:.1f} | max reserved: {:.1f}".format(
        torch.cuda.memory_allocated() / mb, torch.cuda.max_memory_allocated() / mb,
        torch.cuda.memory_reserved() / mb, torch.cuda.max_memory_reserved() / mb)
    logger.info("[Rank %d] (%s) %s", dist.get_rank(), name, s)


def set_random_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def autocast_ctx(args):
    if args.bf16 and args.params_dtype == "fp32":
        return torch.autocast(device_type=args.device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_device(batch, device):
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# =============================================================================
# model / optimizer
# =============================================================================
def build_model(args, device):
    t0 = time.time()
    with torch.device(device):
        model = GPTModel(args)
    if args.params_dtype == "bf16":
        model = model.to(torch.bfloat16)
    n = num_parameters(model)
    logger.info(" > number of parameters on (tensor, data) parallel rank (%d, %d): %d (%.2fB), built in %.1fs",
                mpu.get_tensor_model_parallel_rank(), mpu.get_data_parallel_rank(), n, n / 1e9, time.time() - t0)
    return model


def wrap_model(args, model, device):
    if args.data_parallel_size == 1:
        return model
    if args.data_parallel_wrapper == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(args.device_type, (args.data_parallel_size,))
        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if args.bf16 else None,
                                         reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
        fully_shard(model, mesh=mesh, mp_policy=mp_policy)
        logger.info("wrapped model with FSDP2 (fully_shard) over %d ranks", args.data_parallel_size)
        return model
    ddp = DDP(model, device_ids=[device.index] if args.device_type == "cuda" else None,
              process_group=mpu.get_data_parallel_group(), broadcast_buffers=False,
              bucket_cap_mb=args.ddp_bucket_size_mb, gradient_as_bucket_view=True)
    logger.info("wrapped model with DistributedDataParallel (bucket %d MB)", args.ddp_bucket_size_mb)
    return ddp


def build_optimizer(args, model):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if (p.ndim < 2 or n.endswith(".bias")) else decay).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = {}
    if args.adam_fused:
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps,
                             **kwargs)


# =============================================================================
# evaluation
# =============================================================================
_COMPILED_EVAL = {}


def evaluate(args, model, valid_loader, iteration, device):
    eval_model = checkpointing.unwrap(model) if args.eval_main_process_only else model
    if args.compile_eval:
        key = id(eval_model)
        if key not in _COMPILED_EVAL:
            logger.info("compiling evaluation forward (mode=%s, fullgraph=True)", args.compile_mode)
            _COMPILED_EVAL[key] = torch.compile(eval_model, mode=args.compile_mode, fullgraph=True)
        eval_fn = _COMPILED_EVAL[key]
    else:
        eval_fn = eval_model
    total_batches = len(valid_loader) if args.eval_iters < 0 else min(args.eval_iters, len(valid_loader))
    if args.eval_main_process_only:
        logger.info("running validation on the main process: %d batches", total_batches)
    model.eval()
    t0 = time.time()
    loss_sum = torch.zeros((), device=device)
    n = 0
    with torch.no_grad():
        for i, batch in enumerate(valid_loader):
            if i >= total_batches:
                break
            batch = to_device(batch, device)
            with autocast_ctx(args):
                loss = eval_fn(batch["input_ids"], labels=batch["labels"], attention_mask=batch["attention_mask"])
            loss_sum += loss.float()
            n += 1
            if args.eval_main_process_only and n % 2000 == 0:
                logger.info("  validation progress: %d/%d batches (%.1fs)", n, total_batches, time.time() - t0)
    if not args.eval_main_process_only:
        dist.all_reduce(loss_sum, group=mpu.get_data_parallel_group())
        loss_sum /= args.data_parallel_size
    model.train()
    val_loss = loss_sum.item() / max(n, 1)
    if dist.get_rank() == 0:
        msg = " validation loss at iteration {} | lm loss value: {:.6E} | lm loss PPL: {:.6E} | ".format(
            iteration, val_loss, math.exp(min(20, val_loss)))
        length = len(msg) + 1
        logger.info("-" * length)
        logger.info(msg)
        logger.info("-" * length)
    return val_loss


# =============================================================================
# training
# =============================================================================
def data_iterator(loader, sampler, start_epoch=0, num_epochs=None):
    epoch = start_epoch
    while num_epochs is None or epoch < start_epoch + num_epochs:
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def train(args, model, optimizer, scheduler, ema, train_loader, valid_loader, train_sampler, device, start_iter):
    is_main = dist.get_rank() == 0
    accum = args.grad_accum_steps
    if args.train_epochs is not None:
        iters_per_epoch = len(train_loader) // accum
        train_iters = args.train_epochs * iters_per_epoch
        logger.info("training for %d epoch(s): %d iterations per epoch, %d iterations in total",
                    args.train_epochs, iters_per_epoch, train_iters)
        it = data_iterator(train_loader, train_sampler, 0, args.train_epochs)
    else:
        train_iters = args.train_iters
        it = data_iterator(train_loader, train_sampler)

    model.train()
    iteration = start_iter
    consumed = start_iter * args.global_batch_size
    dp_group = mpu.get_data_parallel_group()
    is_ddp = isinstance(model, DDP)
    is_fsdp = args.data_parallel_wrapper == "fsdp2" and args.data_parallel_size > 1
    train_model = torch.compile(model) if args.compile else model
    interval_t0 = time.time()
    interval_tokens = 0
    interval_loss = 0.0
    interval_iters = 0
    if is_main:
        logger.info("training ...")
        logger.info("before the start of training step, datetime: %s",
                    datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))

    while iteration < train_iters:
        loss_accum = torch.zeros((), device=device)
        for micro in range(accum):
            batch = to_device(next(it), device)
            last = micro == accum - 1
            if is_fsdp:
                model.set_requires_gradient_sync(last)
            sync_ctx = model.no_sync() if (is_ddp and not last) else contextlib.nullcontext()
            with sync_ctx:
                with autocast_ctx(args):
                    loss = train_model(batch["input_ids"], labels=batch["labels"])
                (loss / accum).backward()
            loss_accum += loss.detach().float() / accum
            interval_tokens += int(batch["attention_mask"].sum())

        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
        optimizer.step()
        lr = scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if ema is not None:
            ema.update(checkpointing.unwrap(model))
        iteration += 1
        consumed += args.global_batch_size

        # average the loss over data-parallel ranks for reporting
        reduced = loss_accum.clone()
        if args.data_parallel_size > 1:
            dist.all_reduce(reduced, group=dp_group)
            reduced /= args.data_parallel_size
        interval_loss += reduced.item()
        interval_iters += 1

        if iteration == start_iter + 1 and args.device_type == "cuda" and mpu.get_data_parallel_rank() == 0:
            report_memory("after {} iterations".format(iteration))

        if iteration % args.log_interval == 0:
            elapsed = time.time() - interval_t0
            gn = grad_norm.full_tensor().item() if hasattr(grad_norm, "full_tensor") else float(grad_norm)
            tokens_per_s = interval_tokens * args.data_parallel_size / max(elapsed, 1e-9)
            avg_loss = interval_loss / interval_iters
            if is_main:
                log_string = " iteration {:8d}/{:8d} |".format(iteration, train_iters)
                log_string += " consumed samples: {:12d} |".format(consumed)
                log_string += " elapsed time per iteration (ms): {:.1f} |".format(elapsed * 1000.0 / interval_iters)
                log_string += " tokens/s: {:.0f} |".format(tokens_per_s)
                log_string += " learning rate: {:.6E} |".format(lr)
                log_string += " global batch size: {:5d} |".format(args.global_batch_size)
                log_string += " lm loss: {:.6E} |".format(avg_loss)
                log_string += " grad norm: {:.3f} |".format(gn)
                log_string += " number of skipped iterations: {:3d} |".format(0)
                logger.info(log_string)
                if args.metrics_file is not None:
                    args.metrics_file.write(json.dumps({"iteration": iteration, "lm_loss": avg_loss, "lr": lr,
                                                        "grad_norm": gn, "tokens_per_s": tokens_per_s,
                                                        "time": time.time()}) + "\n")
                    args.metrics_file.flush()
            interval_t0 = time.time()
            interval_tokens = 0
            interval_loss = 0.0
            interval_iters = 0

        if args.eval_interval and iteration % args.eval_interval == 0:
            if args.eval_main_process_only:
                if is_main:
                    evaluate(args, model, valid_loader, iteration, device)
            else:
                evaluate(args, model, valid_loader, iteration, device)
            interval_t0 = time.time()

        if args.save and args.save_interval and iteration % args.save_interval == 0:
            checkpointing.save_checkpoint(args, iteration, model, optimizer, scheduler, ema)
            interval_t0 = time.time()

    logger.info("training finished after %d iterations", iteration)
    return iteration


# =============================================================================
# entry points
# =============================================================================
def worker(args):
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    args.local_rank = local_rank
    faulthandler.enable()
    threading.excepthook = _die_on_thread_exception
    setup_logging(args, rank, world_size)

    if args.device == "auto":
        args.device_type = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        args.device_type = args.device
    if args.device_type == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    logger.info("host %s pid %d: local rank %d -> device %s, backend %s", socket.gethostname(), os.getpid(),
                local_rank, device, backend)

    try:
        timeout = datetime.timedelta(seconds=args.distributed_timeout_seconds)
        dist.init_process_group(backend=backend, timeout=timeout, device_id=device if backend == "nccl" else None)
        mpu.initialize_model_parallel(args.tensor_model_parallel_size, timeout=timeout)
        validate_args(args)
        if rank == 0:
            print("using world size: {}, data-parallel size: {}, tensor-model-parallel size: {}".format(
                args.world_size, args.data_parallel_size, args.tensor_model_parallel_size), flush=True)
            versions = "torch {} | python {}".format(torch.__version__, platform.python_version())
            if args.device_type == "cuda":
                versions += " | CUDA {} | NCCL {} | {}".format(
                    torch.version.cuda, ".".join(map(str, torch.cuda.nccl.version())),
                    torch.cuda.get_device_name(device))
            print(" > " + versions, flush=True)
            print_arguments(args)
        args.metrics_file = open(args.metrics_jsonl, "a") if (args.metrics_jsonl and rank == 0) else None

        set_random_seed(args.seed + 100 * mpu.get_tensor_model_parallel_rank())
        model = build_model(args, device)
        ema = ModelEMA(model, args.ema_decay) if (args.ema_decay > 0 and rank == 0) else None
        if ema is not None:
            logger.info("keeping an exponential moving average of the weights (decay %.4f)", args.ema_decay)
        model = wrap_model(args, model, device)
        optimizer = build_optimizer(args, model)
        decay_iters = args.train_iters if args.train_iters is not None else 1000
        scheduler = OptimizerParamScheduler(optimizer, args.lr, args.min_lr, args.lr_warmup_iters, decay_iters,
                                            args.lr_decay_style)
        start_iter = 0
        if args.load:
            start_iter = checkpointing.load_checkpoint(args, model, optimizer, scheduler, ema)

        logger.info("> building train, validation, and test datasets ...")
        train_loader, valid_loader, train_sampler = data_mod.build_data_loaders(args)
        logger.info("> finished creating datasets ...")

        iteration = train(args, model, optimizer, scheduler, ema, train_loader, valid_loader, train_sampler,
                          device, start_iter)
        if args.save and (not args.save_interval or iteration % args.save_interval != 0):
            checkpointing.save_checkpoint(args, iteration, model, optimizer, scheduler, ema)
        checkpointing.finalize_async_saves()
    except Exception:
        logger.exception("training failed with an uncaught exception")
        raise
    finally:
        for h in logging.getLogger("lm").handlers:
            h.flush()
    dist.destroy_process_group()
    logger.info("exiting")


def _spawn_entry(local_rank, args):
    os.environ["RANK"] = str(local_rank)
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["WORLD_SIZE"] = str(args.nproc_per_node)
    os.environ["LOCAL_WORLD_SIZE"] = str(args.nproc_per_node)
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = str(args.master_port)
    worker(args)


def main():
    args = parse_args()
    if args.launcher == "spawn":
        if args.nproc_per_node is None:
            args.nproc_per_node = max(1, torch.cuda.device_count())
        print("spawning {} worker processes (master {}:{})".format(args.nproc_per_node, args.master_addr,
                                                                   args.master_port), flush=True)
        mp.spawn(_spawn_entry, args=(args,), nprocs=args.nproc_per_node, join=True)
    else:
        worker(args)


if __name__ == "__main__":
    main()
