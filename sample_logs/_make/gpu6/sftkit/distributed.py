import datetime
import logging
import os

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


class DistInfo:
    def __init__(self):
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device("cpu")
        self.backend = "gloo"
        self.cpu_group = None

    @property
    def is_main(self):
        return self.rank == 0


def init_distributed(timeout_s: int = 60) -> DistInfo:
    info = DistInfo()
    if torch.cuda.is_available():
        info.device = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(info.device)
        info.backend = "nccl"
    if info.world_size > 1 or "MASTER_ADDR" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ:
        kwargs = dict(backend=info.backend, timeout=datetime.timedelta(seconds=timeout_s))
        if info.backend == "nccl":
            kwargs["device_id"] = info.device  # eager communicator init
        dist.init_process_group(**kwargs)
        info.rank = dist.get_rank()
        info.world_size = dist.get_world_size()
        # side group for object collectives / checkpoint planning
        info.cpu_group = dist.new_group(backend="gloo") if info.backend == "nccl" else dist.group.WORLD
    return info


def all_reduce_sum(values, info: DistInfo):
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def broadcast_object(obj, info: DistInfo):
    if not dist.is_initialized():
        return obj
    buf = [obj]
    dist.broadcast_object_list(buf, src=0, group=info.cpu_group)
    return buf[0]


def cleanup():
    if dist.is_initialized():
        dist.destroy_process_group()
