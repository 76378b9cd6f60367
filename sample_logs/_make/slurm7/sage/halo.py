"""Boundary (halo) feature exchange between neighbouring partitions, ring order."""
import logging

import torch
import torch.distributed as dist

log = logging.getLogger("sage.halo")


def exchange(g, rank, world):
    """Send our boundary node features to rank+1, receive rank-1's into a halo buffer."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    reqs = []
    if len(g.halo_out) > 0:
        reqs.append(dist.isend(g.feats[torch.from_numpy(g.halo_out)].contiguous(), nxt))
    buf = torch.empty(g.halo_in, g.feats.shape[1])
    if g.halo_in > 0:
        reqs.append(dist.irecv(buf, prv))
    for r in reqs:
        r.wait()
    return buf
