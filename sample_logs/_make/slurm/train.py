"""A small data-parallel CPU training job (gloo) used to produce real SLURM/torchrun logs.

Everything it does is read from the JSON file named by $TRAIN_CONFIG; that file is never printed. It takes no
command-line options, and refuses any it is given (argparse), as a training script does with a misspelled flag.
Sections:
  args      Megatron-style arguments; rank 0 prints them in Megatron's `_print_args` layout.
            With use_mcore_models, a megatron.core TransformerConfig is built from them.
  per_rank  {"<global rank>": {...}} overrides applied to one rank only:
              width         feature width of that rank's data shard
              ready_file    path the rank waits for before its first step (data staging)
              sigkill_at    iteration at which the rank SIGKILLs itself (as the host OOM killer would)
              worker_sigkill_at  sample index at which its DataLoader worker SIGKILLs itself
              stop_after    the rank's data runs out after this many iterations: it returns early, without error
              extra_import  a module the rank imports at start (a node whose environment lacks it)
The stdout of every rank carries one start line; rank 0 also prints iteration lines.
"""

import argparse
import datetime
import importlib
import json
import os
import signal
import socket
import time
import types

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


def load_config():
    with open(os.environ["TRAIN_CONFIG"]) as f:
        return json.load(f)


def print_args(title, args):
    """Print arguments the way Megatron-LM's training/arguments.py `_print_args` lays them out."""
    print(f"------------------------ {title} ------------------------", flush=True)
    lines = []
    for name in vars(args):
        dots = "." * (48 - len(name))
        lines.append(f"  {name} {dots} {getattr(args, name)}")
    for line in sorted(lines, key=lambda s: s.lower()):
        print(line, flush=True)
    print(f"-------------------- end of {title} ---------------------", flush=True)


class Samples(Dataset):
    def __init__(self, size, width, seed, sigkill_at=None):
        self.size = size
        self.width = width
        self.seed = seed
        self.sigkill_at = sigkill_at

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if index == self.sigkill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        x = torch.randn(self.width, generator=g)
        y = x[:4].sum(dim=0, keepdim=True)
        return x, y


def forever(loader):
    while True:
        yield from loader


def shard_path(root, iteration, rank):
    return os.path.join(root, f"iter_{iteration:07d}", f"mp_rank_{rank:02d}", "model_optim_rng.pt")


def build_transformer_config(args):
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads,
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
    )


def load_checkpoint(root, rank, model, optimizer):
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        iteration = int(f.read().strip())
    if rank == 0:
        print(f" loading checkpoint from {root} at iteration {iteration}", flush=True)
    state = torch.load(shard_path(root, iteration, rank))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return iteration


def save_checkpoint(root, iteration, rank, model, optimizer):
    path = shard_path(root, iteration, rank)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iteration": iteration}, path)
    dist.barrier()
    if rank == 0:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(iteration))
        print(f" saved checkpoint at iteration {iteration} to {root}", flush=True)


def train(cfg, args, rank, world_size):
    mine = cfg.get("per_rank", {}).get(str(rank), {})
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)
    )
    model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    dataset = Samples(args.samples_per_rank, mine.get("width", args.width), args.seed + rank,
                      mine.get("worker_sigkill_at"))
    loader = DataLoader(dataset, batch_size=args.micro_batch_size, num_workers=args.num_workers)
    batches = forever(loader)

    start = 0
    if args.load:
        start = load_checkpoint(args.load, rank, model, optimizer)

    ready_file = mine.get("ready_file")
    while ready_file and not os.path.exists(ready_file):
        time.sleep(0.5)

    loss_weights = {"mse": 1.0}
    loss_terms = mine.get("loss_terms", ["mse"])

    t0 = time.time()
    for iteration in range(start + 1, args.train_iters + 1):
        if iteration == mine.get("sigkill_at"):
            os.kill(os.getpid(), signal.SIGKILL)
        if mine.get("stop_after") is not None and iteration > mine["stop_after"]:
            print(f"rank {rank}: data exhausted after {iteration - 1} iterations", flush=True)
            return
        x, y = next(batches)
        loss = sum(loss_weights[term] for term in loss_terms) * torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and iteration % args.log_interval == 0:
            ms = (time.time() - t0) * 1000 / args.log_interval
            print(f" iteration {iteration:8d}/{args.train_iters:8d} | lm loss: {loss.item():.6E} "
                  f"| elapsed time per iteration (ms): {ms:.1f}", flush=True)
            t0 = time.time()
        if args.step_sleep:
            time.sleep(args.step_sleep)

    if args.save:
        save_checkpoint(args.save, args.train_iters, rank, model, optimizer)


@record
def main():
    argparse.ArgumentParser(description="data-parallel CPU training job").parse_args()
    cfg = load_config()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=cfg.get("timeout_s", 30)))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world_size} local_rank {os.environ['LOCAL_RANK']} host {socket.gethostname()} "
          f"pid {os.getpid()}", flush=True)

    extra = cfg.get("per_rank", {}).get(str(rank), {}).get("extra_import")
    if extra:
        importlib.import_module(extra)
    args = types.SimpleNamespace(**cfg["args"], rank=rank, world_size=world_size)
    if rank == 0:
        print_args("arguments", args)
    if getattr(args, "use_mcore_models", False):
        build_transformer_config(args)

    train(cfg, args, rank, world_size)
    dist.destroy_process_group()
    if rank == 0:
        print("training finished", flush=True)


if __name__ == "__main__":
    main()
