import datetime
import logging
import os
import socket

import torch.distributed as dist

log = logging.getLogger("nmt.distributed")


def env_rank():
    """Rank and world size from torchrun's environment, else from srun's."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in os.environ:
        return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), int(os.environ.get("SLURM_LOCALID", 0))
    return 0, 1, 0


def init(cfg, rank, world):
    if world == 1:
        return
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    timeout = datetime.timedelta(seconds=cfg["distributed"].get("timeout_s", 300))
    log.info("distributed init (rank %d): env://%s:%s on host %s", rank, os.environ.get("MASTER_ADDR"),
             os.environ.get("MASTER_PORT"), socket.gethostname())
    dist.init_process_group(cfg["distributed"].get("backend", "gloo"), timeout=timeout)
    log.info("initialized host %s as rank %d", socket.gethostname(), rank)


def is_dist():
    return dist.is_available() and dist.is_initialized()
