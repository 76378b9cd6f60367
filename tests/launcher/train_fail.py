"""A CPU (gloo) job for the launcher's end-to-end tests: one chosen global rank raises.

FAIL_RANK: the rank that raises. SURVIVORS: `collective` (the others enter an all_reduce and see the
peer vanish, as gloo reports it) or `wait` (the others block on the store, as NCCL ranks block until
their collective timeout; gloo would notice the dead peer at once). TIMEOUT_S: the process-group timeout.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    timeout = datetime.timedelta(seconds=float(os.environ.get("TIMEOUT_S", "30")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} host {os.uname().nodename}", flush=True)
    dist.barrier()
    if rank == int(os.environ.get("FAIL_RANK", "-1")):
        time.sleep(0.5)
        raise ValueError(f"simulated failure on rank {rank}: expected batch of 8 samples, got 7")
    if os.environ.get("SURVIVORS", "collective") == "wait":
        print(f"rank {rank}: waiting for step 1 from every rank", flush=True)
        dist.distributed_c10d._get_default_store().wait(["step-1-never-set"], timeout)
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {rank}: all_reduce {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
