"""Process-group setup for the two ways we launch: torchrun (env://) or srun (one task per rank)."""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass

import torch.distributed as dist

HOST = socket.gethostname()


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    launcher: str = "none"

    @property
    def is_main(self):
        return self.rank == 0

    @property
    def is_node_leader(self):
        return self.local_rank == 0


def detect() -> DistEnv:
    env = os.environ
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "LOCAL_RANK" in env):
        return DistEnv(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env["LOCAL_RANK"]),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
            node_rank=int(env.get("GROUP_RANK", 0)),
            launcher="torchrun",
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        ntasks = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", 1)))
        nnodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", 1)))
        return DistEnv(
            rank=int(env["SLURM_PROCID"]),
            world_size=ntasks,
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            local_world_size=max(1, ntasks // max(1, nnodes)),
            node_rank=int(env.get("SLURM_NODEID", 0)),
            launcher="srun",
        )
    return DistEnv()


class _RankFilter(logging.Filter):
    def __init__(self, denv: DistEnv):
        super().__init__()
        self.tag = f"{HOST}:{denv.rank}/{denv.world_size}"

    def filter(self, record):
        record.where = self.tag
        return True


def setup_logging(denv: DistEnv, level=logging.INFO):
    handler = logging.StreamHandler()
    handler.addFilter(_RankFilter(denv))
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s.%(msecs)03d %(levelname)-7s [%(where)s] %(name)s: %(message)s",
            datefmt="%Y-%m-%d %H:%M:%S",
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def init(denv: DistEnv, timeout_s: float, backend: str = "gloo"):
    log = logging.getLogger("kws.dist")
    if denv.world_size <= 1:
        log.info("single process run, not initialising a process group")
        return
    if denv.launcher == "srun":
        os.environ.setdefault("RANK", str(denv.rank))
        os.environ.setdefault("WORLD_SIZE", str(denv.world_size))
        os.environ.setdefault("LOCAL_RANK", str(denv.local_rank))
        if "MASTER_ADDR" not in os.environ:
            raise RuntimeError("MASTER_ADDR is not set; export it in the batch script")
    log.info(
        "init_process_group backend=%s rank=%d world=%d local_rank=%d node=%d master=%s:%s",
        backend, denv.rank, denv.world_size, denv.local_rank, denv.node_rank,
        os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"),
    )
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=denv.rank,
        world_size=denv.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def barrier():
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def cleanup():
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
