"""Rank discovery (torchrun or plain srun) and process-group setup."""
import datetime
import logging
import os
import socket

import torch.distributed as dist

log = logging.getLogger(__name__)


def discover():
    """(rank, local_rank, world) from torchrun's env, else from SLURM's."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ["WORLD_SIZE"])
    if "SLURM_PROCID" in os.environ:
        rank = int(os.environ["SLURM_PROCID"])
        os.environ["RANK"] = str(rank)
        os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        return rank, int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    return 0, 0, 1


def init(cfg, rank, world):
    if world == 1:
        return
    timeout = datetime.timedelta(seconds=int(cfg.get("timeout_s", 600)))
    log.info("init_process_group backend=%s master=%s:%s world=%d timeout=%ss", cfg.get("backend", "gloo"),
             os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"), world, int(timeout.total_seconds()))
    dist.init_process_group(cfg.get("backend", "gloo"), init_method="env://", rank=rank, world_size=world,
                            timeout=timeout)
    log.info("process group ready on %s (pid %d)", socket.gethostname(), os.getpid())


def barrier():
    if dist.is_initialized():
        dist.barrier()


def shutdown():
    if dist.is_initialized():
        dist.destroy_process_group()
