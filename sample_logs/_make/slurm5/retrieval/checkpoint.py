"""Checkpoints: rank 0 writes `<dir>/last.pt`; pretrained item tables come as one part per rank."""
import logging
import os
import time

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def save(path, model, optim, sched, step, cfg):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t0 = time.time()
    state = {"model": model.state_dict(), "optim": optim.state_dict(), "sched": sched.state_dict(),
             "step": step, "cfg": dict(cfg)}
    torch.save(state, path)
    log.info("saved checkpoint %s (%.1f MB, %.1fs)", path, os.path.getsize(path) / 2**20, time.time() - t0)


def resume(path, model, optim, sched):
    state = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    sched.load_state_dict(state["sched"])
    log.info("resumed from %s at step %d", path, state["step"])
    return state["step"]


def load_item_table(model, directory, rank, world):
    """Each rank reads its row range of the exported item table; the ranges are then all-gathered."""
    path = os.path.join(directory, f"part{rank}.pt")
    log.info("loading pretrained item rows from %s", path)
    part = torch.load(path)
    lo, hi = part["rows"]
    weight = part["weight"]
    parts = [torch.empty_like(weight) for _ in range(world)]
    dist.all_gather(parts, weight)
    full = torch.cat(parts)
    with torch.no_grad():
        model.item_emb.weight[: len(full)].copy_(full)
    log.info("item table initialised from %d parts (%d rows; mine %d-%d)", world, len(full), lo, hi)
