#!/usr/bin/env python
"""Train GraphSAGE on a partitioned graph, one partition per rank (DDP over gloo)."""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from sage import ckpt, config, runtime
from sage.graph import NeighborSampler, Partition, batches
from sage.halo import exchange
from sage.model import GraphSAGE


def evaluate(model, g, sampler, bs, n_classes):
    model.eval()
    correct = torch.zeros(())
    total = 0
    conf = torch.zeros(n_classes, n_classes)
    with torch.no_grad():
        for seeds in batches(g.val_idx, bs, None, shuffle=False):
            nodes, blocks = sampler.sample(seeds)
            pred = model(g.feats[torch.from_numpy(nodes)], blocks).argmax(1)
            y = g.labels[torch.from_numpy(seeds)]
            correct += (pred == y).sum()
            total += len(seeds)
            conf.index_put_((y, pred), torch.ones(len(seeds)), accumulate=True)
    model.train()
    return correct, total, conf


def macro_f1(conf):
    c = conf.numpy()
    tp = np.diag(c)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = 2 * tp / (c.sum(0) + c.sum(1))
    return np.nanmean(f1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    ri = runtime.RankInfo()
    log = runtime.setup_logging(ri)
    cfg = config.load(args.config, args.overrides)
    log.info("launcher=%s rank=%d/%d local=%d pid=%d", ri.launcher, ri.rank, ri.world, ri.local_rank, os.getpid())
    torch.set_num_threads(1)
    torch.manual_seed(cfg.train.seed)
    distributed = runtime.init_distributed(ri, cfg.dist.timeout_s)
    log.info("process group up (backend=%s)", dist.get_backend() if distributed else "none")

    g = Partition(os.environ.get("SAGE_DATA_ROOT", cfg.data.root), ri.rank)
    sampler = NeighborSampler(g, cfg.data.fanouts, seed=cfg.train.seed + ri.rank)
    model = GraphSAGE(g.feats.shape[1], cfg.model.hidden, cfg.data.num_classes,
                      cfg.model.layers, cfg.model.aggr, cfg.model.dropout)
    if distributed:
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    nparams = sum(p.numel() for p in model.parameters())
    log.info("model: %d params, fanouts=%s, aggr=%s", nparams, cfg.data.fanouts, cfg.model.aggr)

    ckpt_path = os.path.join(cfg.ckpt.dir, "last.pt")
    start_epoch, step, best = 0, 0, 0.0
    rng = np.random.default_rng(cfg.train.seed + ri.rank)
    for epoch in range(start_epoch, cfg.train.epochs):
        t0 = time.time()
        for i, seeds in enumerate(batches(g.train_idx, cfg.data.batch_size, rng)):
            if i >= cfg.train.max_steps_per_epoch:
                break
            if cfg.model.halo and distributed:
                halo = exchange(g, ri.rank, ri.world)
            nodes, blocks = sampler.sample(seeds)
            x = g.feats[torch.from_numpy(nodes)]
            logits = model(x, blocks)
            loss = F.cross_entropy(logits, g.labels[torch.from_numpy(seeds)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % cfg.train.log_every == 0:
                l = runtime.all_mean(loss.detach().clone())
                log.info("epoch %d step %d loss %.4f (%.2f s/it)", epoch, step, l.item(),
                         (time.time() - t0) / (i + 1))
        correct, total, conf = evaluate(model, g, sampler, cfg.eval.batch_size, cfg.data.num_classes)
        t = torch.tensor([float(correct), float(total)])
        if distributed:
            dist.all_reduce(t)
            dist.all_reduce(conf)
        acc = correct / max(total, 1)
        gacc = (t[0] / t[1]).item()
        score = macro_f1(conf) if cfg.eval.metric == "macro_f1" else gacc
        log.info("epoch %d done: val acc %.4f (local %.4f) %s %.4f in %.1fs", epoch, gacc, acc,
                 cfg.eval.metric, score, time.time() - t0)
        if ri.rank == 0:
            best = max(best, score)
            if cfg.log.metrics_file:
                with open(cfg.log.metrics_file, "a") as f:
                    f.write(json.dumps({"epoch": epoch, "step": step, "val_acc": gacc,
                                        "local_acc": acc, "time": time.time()}) + "\n")
            ckpt.save(ckpt_path, model.module if distributed else model, opt, epoch, step, best,
                      json.loads(json.dumps(cfg)))
        if distributed:
            dist.barrier()
    log.info("training finished: best %s %.4f", cfg.eval.metric, best)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
