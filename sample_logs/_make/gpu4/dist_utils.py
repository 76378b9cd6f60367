"""Process-group set-up, device selection and logging."""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

LOG_FORMAT = "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"

logger = logging.getLogger("trainer")


@dataclass
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self):
        return self.rank == 0


def env_ranks():
    return (
        int(os.environ.get("RANK", 0)),
        int(os.environ.get("WORLD_SIZE", 1)),
        int(os.environ.get("LOCAL_RANK", 0)),
        int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
    )


def setup_logging(rank, log_dir=None, replica_level=logging.WARNING):
    """DeepSpeed-style records on stdout; INFO on rank 0, warnings and above on
    the other ranks. Every rank also writes all records to its own file."""
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
    fmt = logging.Formatter(LOG_FORMAT)
    console = logging.StreamHandler(stream=sys.stdout)
    console.setFormatter(fmt)
    console.setLevel(logging.INFO if rank == 0 else replica_level)
    logger.addHandler(console)
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(log_dir, f"rank{rank}.log"))
        fh.setFormatter(fmt)
        fh.setLevel(logging.INFO)
        logger.addHandler(fh)

    def _thread_excepthook(args):
        if args.exc_type is SystemExit:
            return
        logger.error(
            "Uncaught exception in thread %s",
            args.thread.name if args.thread else "?",
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    threading.excepthook = _thread_excepthook
    logging.captureWarnings(False)
    return logger


def select_device(local_rank):
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % n)
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def init_distributed(timeout_s: int) -> DistEnv:
    rank, world, local_rank, local_world = env_ranks()
    device, backend = select_device(local_rank)
    if world > 1:
        kwargs = dict(backend=backend, timeout=timedelta(seconds=timeout_s))
        if device.type == "cuda":
            kwargs["device_id"] = device
        dist.init_process_group(**kwargs)
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistEnv(rank, world, local_rank, local_world, device, backend)


def barrier():
    if dist.is_initialized():
        dist.barrier()


def cleanup():
    if dist.is_initialized():
        dist.destroy_process_group()
