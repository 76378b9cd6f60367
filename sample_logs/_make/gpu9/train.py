"""Entry point: ``torchrun --nproc-per-node=N train.py --config configs/base.json [--set k=v ...]``
or ``python train.py --spawn N ...`` (needs MASTER_ADDR / MASTER_PORT)."""
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.elastic.multiprocessing.errors import record

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tinyrl.config import parse_args  # noqa: E402
from tinyrl.trainer import GRPOTrainer  # noqa: E402


def run(local_rank: int, cfg, nprocs: int = 0):
    if nprocs:
        os.environ["RANK"] = str(local_rank)
        os.environ["LOCAL_RANK"] = str(local_rank)
        os.environ["WORLD_SIZE"] = str(nprocs)
    trainer = GRPOTrainer(cfg, local_rank)
    trainer.train()
    dist.destroy_process_group()


@record
def main():
    cfg = parse_args()
    if cfg.spawn:
        mp.spawn(run, args=(cfg, cfg.spawn), nprocs=cfg.spawn, join=True)
    else:
        run(int(os.environ.get("LOCAL_RANK", 0)), cfg)


if __name__ == "__main__":
    main()
