"""MAE pretraining entry point: python -m mae.train --config config.json [--set key=value ...]

Works under torchrun (RANK/LOCAL_RANK/WORLD_SIZE from the agent) and under plain srun with one task
per rank (rank from SLURM_PROCID, world size from WORLD_SIZE or SLURM_NTASKS).
"""
import argparse
import datetime
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from mae import __version__
from mae.config import load_config
from mae.data import ShardDataset, rank_shards, read_manifest, stage_to_node_cache
from mae.logutil import set_rank, setup_logging
from mae.model import build_model, cosine_lr

log = logging.getLogger("mae.train")

_PREEMPT = {"signum": None}


def _on_preempt(signum, frame):
    _PREEMPT["signum"] = signum
    log.warning("caught signal %d (%s); will checkpoint at the next step boundary",
                signum, signal.Signals(signum).name)


def init_distributed(cfg):
    env = os.environ
    if "LOCAL_RANK" in env and "TORCHELASTIC_RUN_ID" in env:
        launcher = "torchrun"
        rank, world, local_rank = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    elif "SLURM_PROCID" in env:
        launcher = "srun"
        rank = int(env["SLURM_PROCID"])
        world = int(env.get("WORLD_SIZE") or env["SLURM_NTASKS"])
        local_rank = int(env.get("SLURM_LOCALID", 0))
        env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"] = str(rank), str(world), str(local_rank)
    else:
        launcher = "local"
        rank, world, local_rank = 0, 1, 0
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29500")
        env["RANK"], env["WORLD_SIZE"] = "0", "1"
    set_rank(rank, world)
    log.info("mae %s pid=%d launcher=%s rank=%d world_size=%d local_rank=%d master=%s:%s job=%s",
             __version__, os.getpid(), launcher, rank, world, local_rank, env.get("MASTER_ADDR"),
             env.get("MASTER_PORT"), env.get("SLURM_JOB_ID"))
    dist.init_process_group(cfg["dist"]["backend"], init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg["dist"]["timeout_s"]))
    log.info("process group ready (backend=%s)", dist.get_backend())
    return rank, world, local_rank


def per_rank_batch(cfg, world):
    gbs = cfg["train"]["global_batch_size"]
    if gbs % world != 0:
        raise ValueError(f"train.global_batch_size={gbs} must be divisible by the world size ({world})")
    return gbs // world


def save_checkpoint(cfg, model, opt, epoch, step, rank):
    d = cfg["ckpt"]["dir"]
    os.makedirs(d, exist_ok=True)
    if rank == 0:
        tmp = os.path.join(d, "last.pt.tmp")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                    "step": step, "config": cfg}, tmp)
        os.replace(tmp, os.path.join(d, "last.pt"))
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
               os.path.join(d, f"rng_state_{rank}.pt"))
    dist.barrier()
    if rank == 0:
        log.info("saved checkpoint %s (epoch=%d step=%d)", os.path.join(d, "last.pt"), epoch, step)


def maybe_resume(cfg, model, opt, rank):
    d = cfg["ckpt"]["dir"]
    path = os.path.join(d, "last.pt")
    if cfg["ckpt"]["resume"] != "auto" or not os.path.exists(path):
        log.info("no checkpoint found in %s, starting from scratch", d)
        return 0, 0
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    rng = torch.load(os.path.join(d, f"rng_state_{rank}.pt"), weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    log.info("resumed from %s: epoch=%d step=%d", path, ckpt["epoch"], ckpt["step"])
    return ckpt["epoch"] + 1, ckpt["step"]


def save_recon_grid(model, imgs, pred, mask, path):
    """Write originals / masked / reconstructions of the first images as one uint8 array."""
    recon = model.unpatchify(pred)
    vis = model.unpatchify(model.patchify(imgs) * (1 - mask).unsqueeze(-1))
    grid = torch.cat([imgs, vis, recon.clamp(0, 1)], dim=0)
    np.save(path, grid.mul(255).astype(np.uint8))


@torch.no_grad()
def evaluate(cfg, model, epoch):
    ecfg = cfg["eval"]
    val = np.load(os.path.join(cfg["data"]["root"], "val.npy"))
    if ecfg["num_images"]:
        val = val[: ecfg["num_images"]]
    bs = ecfg["batch_size"] or len(val)  # 0 = whole split in one forward
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(val), bs):
        imgs = torch.from_numpy(val[i:i + bs]).float().div_(255.0)
        loss, pred, mask = model(imgs)
        total += loss.item() * len(imgs)
        n += len(imgs)
        if i == 0 and ecfg["save_images"]:
            os.makedirs("recon", exist_ok=True)
            save_recon_grid(model, imgs[:8], pred[:8], mask[:8], f"recon/epoch{epoch:03d}.npy")
    model.train()
    log.info("eval epoch=%d val_loss=%.4f images=%d", epoch, total / max(1, n), n)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    setup_logging()
    cfg = load_config(args.config, args.set)
    signal.signal(signal.SIGUSR1, _on_preempt)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    rank, world, local_rank = init_distributed(cfg)
    bs = per_rank_batch(cfg, world)
    tcfg, mcfg = cfg["train"], cfg["model"]
    torch.manual_seed(tcfg["seed"] + rank)
    np.random.seed(tcfg["seed"] + rank)
    random.seed(tcfg["seed"] + rank)

    manifest = read_manifest(cfg)
    data_dir = cfg["data"]["root"]
    if cfg["data"]["node_cache"]:
        data_dir = stage_to_node_cache(cfg, manifest, local_rank)
        dist.barrier()
    files = [os.path.join(data_dir, s["file"]) for s in rank_shards(manifest, rank, world)]
    ds = ShardDataset(files, mcfg["img_size"])
    g = torch.Generator().manual_seed(tcfg["seed"] + rank)
    loader = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, drop_last=False, generator=g)
    steps = torch.tensor([len(loader)])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    steps_per_epoch = int(steps.item())
    log.info("%d images from %d shard(s), batch %d/rank, %d steps/epoch", len(ds), len(files), bs, steps_per_epoch)

    model = build_model(mcfg)
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg["lr"], weight_decay=tcfg["weight_decay"],
                            betas=(0.9, 0.95))
    start_epoch, step = maybe_resume(cfg, model, opt, rank)
    ddp = DDP(model)
    total_steps = steps_per_epoch * tcfg["epochs"]
    if rank == 0:
        log.info("params=%.2fM epochs=%d total_steps=%d", sum(p.numel() for p in model.parameters()) / 1e6,
                 tcfg["epochs"], total_steps)

    flag = torch.zeros(1)
    for epoch in range(start_epoch, tcfg["epochs"]):
        t0 = time.time()
        for i, batch in enumerate(loader):
            if i >= steps_per_epoch:
                break
            imgs = batch.reshape(bs, mcfg["in_chans"], mcfg["img_size"], mcfg["img_size"])
            for grp in opt.param_groups:
                grp["lr"] = cosine_lr(step, total_steps, tcfg["lr"], tcfg["warmup_steps"])
            loss, _, _ = ddp(imgs)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            flag.fill_(1.0 if _PREEMPT["signum"] else 0.0)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item() > 0:
                save_checkpoint(cfg, model, opt, epoch - 1 if i + 1 < steps_per_epoch else epoch, step, rank)
                if rank == 0 and cfg["ckpt"]["requeue_on_signal"] and os.environ.get("SLURM_JOB_ID"):
                    log.warning("requeueing job %s", os.environ["SLURM_JOB_ID"])
                    subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=False)
                log.warning("stopping after preemption checkpoint at step %d", step)
                dist.destroy_process_group()
                return 0
            if rank == 0 and step % tcfg["log_every"] == 0:
                log.info("epoch %d step %d/%d loss %.4f lr %.2e", epoch, step, total_steps, loss.item(),
                         opt.param_groups[0]["lr"])
        if rank == 0:
            log.info("epoch %d done in %.1fs", epoch, time.time() - t0)
        ecfg = cfg["eval"]
        if ecfg["every_epochs"] and (epoch + 1) % ecfg["every_epochs"] == 0:
            if rank == 0:
                evaluate(cfg, model, epoch)
            dist.barrier()
        if cfg["ckpt"]["every_epochs"] and (epoch + 1) % cfg["ckpt"]["every_epochs"] == 0:
            save_checkpoint(cfg, model, opt, epoch, step, rank)
    if rank == 0:
        log.info("training finished: %d steps on %s", step, socket.gethostname())
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
