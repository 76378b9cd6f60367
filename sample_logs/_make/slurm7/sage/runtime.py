"""Process-level runtime: rank discovery (torchrun env or SLURM), logging, process group."""
import datetime
import logging
import os
import socket
import sys

import torch
import torch.distributed as dist


class RankInfo:
    def __init__(self):
        env = os.environ
        if "RANK" in env and "WORLD_SIZE" in env:
            self.rank = int(env["RANK"])
            self.world = int(env["WORLD_SIZE"])
            self.local_rank = int(env.get("LOCAL_RANK", 0))
            self.launcher = "torchrun"
        elif "SLURM_PROCID" in env:
            self.rank = int(env["SLURM_PROCID"])
            self.world = int(env["SLURM_NTASKS"])
            self.local_rank = int(env.get("SLURM_LOCALID", 0))
            self.launcher = "srun"
        else:
            self.rank, self.world, self.local_rank, self.launcher = 0, 1, 0, "local"
        self.host = socket.gethostname()


class _Fmt(logging.Formatter):
    def __init__(self, ri):
        super().__init__()
        self.ri = ri

    def format(self, record):
        ts = datetime.datetime.fromtimestamp(record.created).strftime("%m-%d %H:%M:%S.%f")[:-3]
        msg = record.getMessage()
        if record.exc_info:
            msg = msg + "\n" + self.formatException(record.exc_info)
        return f"{ts} {record.levelname[0]} {self.ri.host}/{self.ri.rank}:{self.ri.world} {record.name}| {msg}"


def setup_logging(ri, level="INFO"):
    h = logging.StreamHandler(sys.stdout)
    h.setFormatter(_Fmt(ri))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(level)
    return logging.getLogger("sage")


def init_distributed(ri, timeout_s):
    if ri.world == 1:
        return False
    if ri.launcher == "srun":
        os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(ri.rank), str(ri.world)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return True


def all_mean(t):
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
        t /= dist.get_world_size()
    return t
