"""Pretrain a GPT model (Megatron-Lite)."""

import faulthandler
import math
import os
import socket
import sys
import time
from datetime import datetime, timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from megatron_lite import parallel_state as ps
from megatron_lite.arguments import parse_args, print_args, validate_args
from megatron_lite.checkpointing import load_checkpoint, save_checkpoint
from megatron_lite.data import build_train_data_iterator, get_batch
from megatron_lite.model import GPTModel, TransformerConfig
from megatron_lite.optimizer import (EMA, MegatronOptimizer, OptimizerParamScheduler,
                                     calc_params_l2_norm)
from megatron_lite.tensor_parallel import model_parallel_seed
from megatron_lite.utils import (Heartbeat, Timers, is_last_rank, print_datetime, print_rank_0,
                                 print_rank_last, setup_rank_logfile)

_START_TIME = time.time()


def _vocab_size_with_padding(orig_vocab_size, args):
    """Pad the vocab so that embedding tables split evenly and stay GEMM friendly."""
    after = orig_vocab_size
    multiple = args.make_vocab_size_divisible_by
    while (after % multiple) != 0:
        after += 1
    print_rank_0(" > padded vocab (size: {}) with {} dummy tokens (new size: {})".format(
        orig_vocab_size, after - orig_vocab_size, after))
    return after


def build_tokenizer(args):
    print_rank_0("> building {} tokenizer ...".format(args.tokenizer_type))
    if args.tokenizer_type == "GPT2BPETokenizer":
        assert args.vocab_file is not None and args.merge_file is not None
        vocab_size = 50257
    else:
        vocab_size = args.vocab_size
    args.padded_vocab_size = _vocab_size_with_padding(vocab_size, args)


def initialize_megatron(args):
    if args.distributed_backend == "nccl":
        # torchrun exports LOCAL_RANK, srun exports SLURM_LOCALID; derive it from the
        # global rank so that every launcher gives the same mapping
        if args.local_rank is None:
            args.local_rank = args.rank % args.gpus_per_node
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
    else:
        device = torch.device("cpu")
        args.local_rank = int(os.getenv("LOCAL_RANK", "0"))

    print_rank_0("> initializing torch distributed ...")
    dist.init_process_group(backend=args.distributed_backend, world_size=args.world_size,
                            rank=args.rank,
                            timeout=timedelta(minutes=args.distributed_timeout_minutes))
    tp = args.tensor_model_parallel_size
    ps.initialize_model_parallel(tp, args.distributed_timeout_minutes)
    print_rank_0("> initialized tensor model parallel with size {}".format(tp))
    print_rank_0("> initialized pipeline model parallel with size {}".format(
        args.pipeline_model_parallel_size))

    where = [None] * args.world_size
    dist.all_gather_object(where, "{}:{}".format(socket.gethostname(), device),
                           group=ps.get_world_group_gloo())
    for r, w in enumerate(where):
        print_rank_0("  > rank {} on {}".format(r, w))

    print_rank_0("> setting random seeds to {} ...".format(args.seed))
    import random
    import numpy as np
    random.seed(args.seed)
    np.random.seed(args.seed)
    model_parallel_seed(args.seed, device)
    return device


def setup_model_and_optimizer(args, device, timers):
    print_rank_0("building GPT model ...")
    config = TransformerConfig.from_args(args)
    if args.parallel_layout == "fsdp2":
        from megatron_lite.fsdp import build_fsdp2_model
        model = build_fsdp2_model(args, config, device)
        n_local = sum(p.numel() for p in model.parameters())
        print_rank_0(" > number of parameters (sharded over {} ranks): {}".format(
            args.world_size, n_local))
    else:
        with torch.device(device):
            model = GPTModel(config)
        if ps.get_data_parallel_rank() == 0:
            print(" > number of parameters on (tensor, pipeline) model parallel rank ({}, {}): {}"
                  .format(ps.get_tensor_model_parallel_rank(), 0,
                          sum(p.numel() for p in model.parameters())), flush=True)
    optimizer = MegatronOptimizer(args, model)
    opt_param_scheduler = OptimizerParamScheduler(
        optimizer, max_lr=args.lr, min_lr=args.min_lr, warmup_steps=args.lr_warmup_iters,
        decay_steps=args.lr_decay_iters, decay_style=args.lr_decay_style)
    iteration = 0
    if args.load is not None:
        timers("load-checkpoint").start()
        iteration = load_checkpoint(model, optimizer, opt_param_scheduler, args)
        timers("load-checkpoint").stop()
    ema = EMA(model, args.ema_decay) if args.ema_decay else None
    return model, optimizer, opt_param_scheduler, ema, iteration


def train_step(args, model, optimizer, opt_param_scheduler, data_iterator, device, timers):
    optimizer.zero_grad()
    timers("forward-backward").start()
    num_microbatches = args.num_microbatches
    total_loss = torch.zeros(1, dtype=torch.float, device=device)
    use_autocast = args.bf16 and args.parallel_layout == "megatron"
    for _ in range(num_microbatches):
        tokens, labels, position_ids = get_batch(data_iterator, args, device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_autocast):
            output_tensor = model(tokens, position_ids, labels)
        loss = output_tensor.float().mean() / num_microbatches
        optimizer.scale_loss(loss).backward()
        total_loss += loss.detach()
    timers("forward-backward").stop()

    timers("optimizer").start()
    update_successful, grad_norm = optimizer.step()
    timers("optimizer").stop()
    if update_successful:
        opt_param_scheduler.step(increment=1)

    if ps.get_data_parallel_world_size() > 1:
        dist.all_reduce(total_loss, group=ps.get_data_parallel_group())
        total_loss /= ps.get_data_parallel_world_size()
    return total_loss.item(), not update_successful, grad_norm


def training_log(args, iteration, lm_loss, learning_rate, loss_scale, grad_norm, params_norm,
                 skipped_iter, stats, timers, device):
    stats["skipped"] += int(skipped_iter)
    got_nan = not math.isfinite(lm_loss)
    stats["nan"] += int(got_nan)
    stats["loss_sum"] += 0.0 if got_nan else lm_loss
    stats["count"] += 1

    # the loss only lives on the last stage, so the sanity check runs there
    if is_last_rank():
        bad = got_nan or (grad_norm is not None and not math.isfinite(grad_norm))
        if bad:
            what = "NaN" if (got_nan or grad_norm != grad_norm) else "Inf"
            raise RuntimeError(
                "Rank {}: found {} in {} at iteration {} (lm loss {:.6E}, grad norm {}, "
                "loss scale {:.1f})".format(dist.get_rank(), what,
                                            "loss" if got_nan else "grad norm", iteration,
                                            lm_loss, grad_norm, loss_scale))

    if iteration % args.log_interval == 0:
        elapsed = timers("interval-time").elapsed()
        avg = stats["loss_sum"] / max(1, stats["count"] - stats["nan"])
        log_string = " [{}]".format(datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
        log_string += " iteration {:8d}/{:8d} |".format(iteration, args.train_iters)
        log_string += " consumed samples: {:12d} |".format(args.consumed_train_samples)
        log_string += " elapsed time per iteration (ms): {:.1f} |".format(
            elapsed * 1000.0 / args.log_interval)
        log_string += " learning rate: {:.6E} |".format(learning_rate)
        log_string += " global batch size: {:5d} |".format(args.global_batch_size)
        log_string += " lm loss: {:.6E} |".format(avg)
        log_string += " loss scale: {:.1f} |".format(loss_scale)
        if grad_norm is not None:
            log_string += " grad norm: {:.3f} |".format(grad_norm)
        if params_norm is not None:
            log_string += " params norm: {:.3f} |".format(params_norm)
        log_string += " number of skipped iterations: {:3d} |".format(stats["skipped"])
        log_string += " number of nan iterations: {:3d} |".format(stats["nan"])
        print_rank_last(log_string)
        stats.update(skipped=0, nan=0, loss_sum=0.0, count=0)
        if not stats.get("memory_reported") and device.type == "cuda":
            stats["memory_reported"] = True
            if ps.get_data_parallel_rank() == 0:
                mb = 1024.0 * 1024.0
                print("[Rank {}] (after {} iterations) memory (MB) | allocated: {:.1f} | "
                      "max allocated: {:.1f} | reserved: {:.1f} | max reserved: {:.1f}".format(
                          dist.get_rank(), iteration, torch.cuda.memory_allocated() / mb,
                          torch.cuda.max_memory_allocated() / mb,
                          torch.cuda.memory_reserved() / mb,
                          torch.cuda.max_memory_reserved() / mb), flush=True)
        timers.log(["forward-backward", "optimizer"], normalizer=args.log_interval)


@record
def main():
    faulthandler.enable()
    args = parse_args()
    if args.train_log_dir:
        setup_rank_logfile(args.train_log_dir, args.rank)
    args = validate_args(args)
    args.num_microbatches = args.global_batch_size // (args.micro_batch_size *
                                                        args.data_parallel_size)
    print_args(args)
    build_tokenizer(args)
    print_rank_0("setting number of micro-batches to constant {}".format(args.num_microbatches))

    device = initialize_megatron(args)
    heartbeat = Heartbeat(args.heartbeat_timeout, args.rank)
    heartbeat.start()
    timers = Timers(device)
    print_rank_0("time to initialize megatron (seconds): {:.3f}".format(time.time() - _START_TIME))
    print_datetime("after megatron is initialized")

    heartbeat.beat("model and optimizer setup")
    timers("model-and-optimizer-setup").start(barrier=True)
    model, optimizer, opt_param_scheduler, ema, iteration = setup_model_and_optimizer(
        args, device, timers)
    timers("model-and-optimizer-setup").stop()
    print_datetime("after model, optimizer, and learning rate scheduler are built")
    timers.log(["model-and-optimizer-setup"])

    heartbeat.beat("building datasets")
    args.consumed_train_samples = iteration * args.global_batch_size
    timers("train/valid/test-data-iterators-setup").start()
    train_data_iterator = build_train_data_iterator(args, args.consumed_train_samples)
    timers("train/valid/test-data-iterators-setup").stop()
    heartbeat.beat("after datasets")
    print_datetime("after dataloaders are built")
    timers.log(["train/valid/test-data-iterators-setup"])

    print_rank_0("done with setup ...")
    print_rank_0("training ...")
    print_datetime("before the start of training step")
    model.train()
    stats = {"skipped": 0, "nan": 0, "loss_sum": 0.0, "count": 0}
    timers("interval-time").start(barrier=True)
    while iteration < args.train_iters:
        heartbeat.beat("iteration {}".format(iteration + 1))
        lm_loss, skipped_iter, grad_norm = train_step(
            args, model, optimizer, opt_param_scheduler, train_data_iterator, device, timers)
        iteration += 1
        args.consumed_train_samples += args.global_batch_size
        if ema is not None and not skipped_iter:
            ema.update(model)
        params_norm = calc_params_l2_norm(model) if args.log_params_norm else None
        training_log(args, iteration, lm_loss, optimizer.param_groups[0]["lr"],
                     optimizer.get_loss_scale(), grad_norm, params_norm, skipped_iter, stats,
                     timers, device)
        if args.save and args.save_interval and iteration % args.save_interval == 0:
            heartbeat.beat("saving checkpoint")
            save_checkpoint(iteration, model, optimizer, opt_param_scheduler, args)
        if args.exit_interval and iteration % args.exit_interval == 0:
            print_datetime("exiting program at iteration {}".format(iteration))
            break

    print_datetime("after training is done")
    heartbeat.timeout = 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
