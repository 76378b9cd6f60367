#!/usr/bin/env python
"""Train a 2D UNet on sharded image/mask stacks; DDP over gloo; sliding-window validation."""
import argparse
import faulthandler
import os
import socket
import sys
import time

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from segtrain import __version__, ckpt, config, dist, infer, logutil, viz
from segtrain.data import ShardSet, ValSet
from segtrain.losses import SegLoss
from segtrain.unet import UNet


def validate(model, cfg, rank, world, log):
    m = model.module if isinstance(model, DDP) else model
    m.eval()
    nc = cfg["model"]["num_classes"]
    inf = cfg["infer"]
    dsum = torch.zeros(nc + 1, dtype=torch.float64)
    for name, img, msk, meta in ValSet(cfg["data"]["val_dir"], rank, world):
        prob = infer.sliding_window(m, img, nc, inf["window"], inf["stride"])
        if inf.get("stitch_original", False):
            pred = infer.stitch_to_original(prob, meta["orig_size"])
            target = msk.repeat(pred.shape[0] // msk.shape[0], 0).repeat(pred.shape[1] // msk.shape[1], 1)
        else:
            pred, target = prob.argmax(0).numpy(), msk
        d = infer.dice_per_class(pred, target, nc)
        dsum[:nc] += torch.from_numpy(d)
        dsum[nc] += 1
        log.info("val %s %dx%d dice=%s", name, img.shape[0], img.shape[1], " ".join("%.3f" % v for v in d))
    dist.all_reduce_(dsum)
    m.train()
    return (dsum[:nc] / dsum[nc].clamp(min=1)).tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", default="outputs")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    faulthandler.enable()
    rank, world, local_rank = dist.env()
    log = logutil.setup(rank, world)
    cfg = config.apply_overrides(config.load(args.config), args.overrides)
    torch.set_num_threads(cfg.get("threads", 1))
    torch.manual_seed(cfg["seed"])
    log.info("segtrain %s torch %s host %s pid %d local_rank %d", __version__, torch.__version__,
             socket.gethostname(), os.getpid(), local_rank)
    if rank == 0:
        log.info("config %s", cfg)

    dist.init(rank, world, cfg["dist"]["timeout_s"])
    log.info("process group ready (backend gloo, world %d)", world)

    mc = cfg["model"]
    model = UNet(in_ch=1, num_classes=mc["num_classes"], base=mc["base"], depth=mc["depth"])
    tc = cfg["train"]
    opt = torch.optim.AdamW(model.parameters(), lr=tc["lr"], weight_decay=tc["weight_decay"])
    start_epoch, step = 1, 0
    ckpt_dir = os.path.join(args.out, "ckpt")
    if tc.get("resume", False):
        state = ckpt.resume(ckpt_dir)
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start_epoch, step = state["epoch"] + 1, state["step"]
            log.info("resumed at epoch %d step %d", start_epoch, step)
    if world > 1:
        model = DDP(model)
    criterion = SegLoss(cfg["loss"], mc["num_classes"])

    dc = cfg["data"]
    ds = ShardSet(dc["train_dir"], rank, world, dc["crop"], dc["pos_fraction"], cfg["seed"])
    loader = torch.utils.data.DataLoader(ds, batch_size=tc["batch_size"], shuffle=True, drop_last=True,
                                         num_workers=0)
    log.info("train images on this rank: %d, batches/epoch: %d", len(ds), len(loader))

    vc = cfg.get("viz", {})
    viz_rank = vc.get("rank", 0) % world
    for epoch in range(start_epoch, tc["epochs"] + 1):
        t0 = time.time()
        run_loss = 0.0
        for i, (x, y) in enumerate(loader):
            if i >= tc["steps_per_epoch"]:
                break
            logits = model(x)
            loss = criterion(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            run_loss += loss.item()
            if step % tc["log_every"] == 0:
                log.info("epoch %d step %d loss %.4f lr %.2e", epoch, step, loss.item(), opt.param_groups[0]["lr"])
        log.info("epoch %d done in %.1fs mean loss %.4f", epoch, time.time() - t0, run_loss / max(i, 1))

        if vc.get("every", 0) and epoch % vc["every"] == 0 and rank == viz_rank:
            with torch.no_grad():
                pred = logits.argmax(1)
            img = (x[0, 0].numpy() * 255).astype(np.uint8)
            rgb = viz.overlay(img, pred[0].astype(np.uint8))
            viz.write_ppm(os.path.join(args.out, "viz", "epoch%03d.ppm" % epoch), rgb)

        if epoch % tc["val_every"] == 0:
            d = validate(model, cfg, rank, world, log)
            if rank == 0:
                log.info("epoch %d val dice %s mean %.4f", epoch, " ".join("%.3f" % v for v in d),
                         float(np.mean(d[1:])))
        if rank == 0 and epoch % tc["ckpt_every"] == 0:
            ckpt.save(model.module if world > 1 else model, opt, epoch, step, ckpt_dir, tc["keep_last"])
        dist.barrier()
    log.info("training finished at step %d", step)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
