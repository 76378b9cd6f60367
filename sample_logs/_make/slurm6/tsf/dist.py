"""Process-group setup: torchrun's env:// variables, or SLURM's when srun starts one task per rank."""
import datetime
import os
import subprocess

import torch.distributed as dist


def detect():
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in os.environ:
        return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), int(os.environ.get("SLURM_LOCALID", 0))
    return 0, 1, 0


def _master_addr():
    if "MASTER_ADDR" in os.environ:
        return os.environ["MASTER_ADDR"]
    nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if nodes:
        out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True)
        return out.stdout.split()[0]
    return "127.0.0.1"


def init(rank, world, timeout_s):
    if world == 1:
        return False
    os.environ.setdefault("MASTER_ADDR", _master_addr())
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return True
