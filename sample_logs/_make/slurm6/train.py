"""Train the PatchMixer forecaster on this rank's stations.

    python train.py --config configs/base.toml [--set a.b=v ...] [--resume ckpt/last.pt]
"""
import argparse
import faulthandler
import hashlib
import json
import os
import sys
import time
from itertools import cycle
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from tsf import config as tcfg, ckpt, data, dist as tdist, logutil
from tsf.model import PatchMixer

faulthandler.enable()
sys.setrecursionlimit(1_000_000)  # region hierarchies can be deep


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--resume", default=None)
    ap.add_argument("--run-dir", default="runs/default")
    return ap.parse_args()


def evaluate(model, cfg, rank, meta, scaler, m):
    log = logutil.logging.getLogger("tsf.eval")
    dcfg = cfg["data"]
    ids = meta["shards"][str(rank)]
    info = {s["id"]: s for s in meta["stations"]}
    model.eval()
    metrics = {}
    sse, n = 0.0, 0
    with torch.no_grad():
        for sid in ids:
            ts, vals = data.read_station(Path(dcfg["root"]) / "holdout" / info[sid]["file"])
            ts, vals = data.regularize(ts, vals, info[sid]["freq_s"])
            x = scaler(vals).astype(np.float32)
            c, h = dcfg["context"], dcfg["horizon"]
            xs = torch.from_numpy(np.stack([x[t:t + c] for t in range(0, len(x) - c - h + 1)]))
            ys = torch.from_numpy(np.stack([x[t + c:t + c + h] for t in range(0, len(x) - c - h + 1)]))
            pred = torch.cat([model(xs[i:i + cfg["train"]["batch_size"]]) for i in range(0, len(xs) - cfg["train"]["batch_size"] + 1, cfg["train"]["batch_size"])])
            err = (pred - ys[:len(pred)]).pow(2)
            naive = (ys[:len(pred)] - xs[:len(pred), -1:]).abs().mean()
            metrics["mse/" + sid] = float(err.mean())
            metrics["mase/" + sid] = float((pred - ys[:len(pred)]).abs().mean() / (naive + 1e-6))
            sse += float(err.sum()); n += err.numel()
    model.train()
    if dist.is_initialized() and cfg.get("eval", {}).get("leaderboard", True):
        # per-station MASE from every rank, for the leaderboard rank 0 writes
        local = torch.tensor([metrics["mase/" + sid] for sid in ids], dtype=torch.float64)
        board = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(board, local)
        if rank == 0:
            with open(Path(cfg["_run_dir"]) / "leaderboard.json", "w") as f:
                json.dump([b.tolist() for b in board], f)
    t = torch.tensor([sse, float(n)], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t)
    return float(t[0] / t[1]), metrics


def main():
    args = parse()
    cfg = tcfg.apply_overrides(tcfg.load(args.config), args.overrides)
    cfg["_run_dir"] = args.run_dir
    Path(args.run_dir).mkdir(parents=True, exist_ok=True)
    rank, world, local_rank = tdist.detect()
    log = logutil.setup(rank, world)
    chash = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:10]
    logutil.kv(log, "starting", pid=os.getpid(), config=args.config, config_hash=chash,
               overrides=args.overrides, torch=torch.__version__, local_rank=local_rank)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(cfg["train"]["seed"])

    distributed = tdist.init(rank, world, cfg["dist"]["timeout_s"])
    logutil.kv(log, "process group ready", backend="gloo" if distributed else "none",
               master=f'{os.environ.get("MASTER_ADDR")}:{os.environ.get("MASTER_PORT")}')

    dcfg = cfg["data"]
    meta = data.load_meta(dcfg["root"])
    info = {s["id"]: s for s in meta["stations"]}
    ids = meta["shards"][str(rank)]
    raw = []
    for sid in ids:
        ts, vals = data.read_station(Path(dcfg["root"]) / "train" / info[sid]["file"])
        vals = data.smooth(vals, dcfg.get("smoothing", "none"), dcfg.get("smooth_window", 5))
        raw.append(vals)
        logutil.kv(log, "station loaded", station=sid, rows=len(vals), channels=vals.shape[1])
    allv = np.concatenate(raw)
    scaler = data.Scaler(allv.mean(0), allv.std(0) + 1e-6)
    series = [scaler(v).astype(np.float32) for v in raw]
    m = data.seasonal_period(allv, cfg["features"]["max_lag"])
    logutil.kv(log, "seasonality", period=m)

    if cfg.get("hier", {}).get("reconcile", False):
        tree = data.region_tree(Path(dcfg["root"]) / "hierarchy.csv", ids)
        data.cache_tree(tree, Path(args.run_dir) / "cache" / f"regions-rank{rank}.pkl")
        logutil.kv(log, "region tree cached", roots=len(tree))

    ds = data.Windows(series, dcfg["context"], dcfg["horizon"])
    dl = DataLoader(ds, batch_size=cfg["train"]["batch_size"], shuffle=True, drop_last=False,
                    num_workers=0, generator=torch.Generator().manual_seed(cfg["train"]["seed"] + rank))
    logutil.kv(log, "dataset", windows=len(ds), batches_per_epoch=len(dl))

    model = PatchMixer(allv.shape[1], dcfg["context"], dcfg["horizon"], cfg["model"]["patch_len"],
                       cfg["model"]["d_model"], cfg["train"]["batch_size"])
    if distributed:
        model = DDP(model)
    core = model.module if distributed else model
    optim = torch.optim.AdamW(model.parameters(), lr=cfg["optim"]["lr"], weight_decay=cfg["optim"]["weight_decay"])
    step0 = 0
    if args.resume:
        state = ckpt.load(args.resume)
        core.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        step0 = state["step"]

    tcfg_ = cfg["train"]
    it = cycle(dl)
    t0 = time.time()
    for step in range(step0 + 1, step0 + tcfg_["steps"] + 1):
        x, y = next(it)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        if step % tcfg_["log_every"] == 0:
            logutil.kv(log, "train", step=step, loss=round(float(loss), 5), sps=round(step / (time.time() - t0), 2))
        if step % tcfg_["eval_every"] == 0:
            vloss, per_station = evaluate(core, cfg, rank, meta, scaler, m)
            logutil.kv(logutil.logging.getLogger("tsf.eval"), "eval", step=step, val_mse=round(vloss, 5), **per_station)
        if rank == 0 and step % tcfg_["ckpt_every"] == 0:
            ckpt.save(Path(args.run_dir) / "ckpt" / "last.pt", core, optim, step, scaler, cfg)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    logutil.kv(log, "done", steps=tcfg_["steps"], secs=round(time.time() - t0, 1))


if __name__ == "__main__":
    main()
