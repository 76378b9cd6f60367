#!/usr/bin/env python
"""Continuous evaluation: wait for new checkpoints of a running training job and score them.

Runs as its own job step next to the trainers; uses the same eval code (and a 1-rank process group so
the metric all-reduce in retrieval.evaluate works unchanged).
"""
import argparse
import logging
import os
import time

import torch
import torch.distributed as dist

from retrieval import config, logutil
from retrieval.data import load_eval
from retrieval.evaluate import evaluate
from retrieval.model import TwoTower

log = logging.getLogger("retrieval.eval_watch")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--poll", type=float, default=10.0)
    ap.add_argument("--max-wait", type=float, default=3600.0)
    args = ap.parse_args()
    logutil.setup(0, 1)
    cfg = config.load(args.config)
    c = config.Cfg(cfg)
    dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1)
    log.info("evaluator up (master %s:%s), watching %s", os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
             os.path.expandvars(c.ckpt.dir))
    hist, hist_len, target = load_eval(os.path.expandvars(c.data.root), 0)
    path = os.path.join(os.path.expandvars(c.ckpt.dir), "last.pt")
    seen = None
    t0 = time.time()
    while time.time() - t0 < args.max_wait:
        if os.path.exists(path) and os.path.getmtime(path) != seen:
            seen = os.path.getmtime(path)
            state = torch.load(path, map_location="cpu", weights_only=False)
            model = TwoTower(c.data.n_items, dim=c.model.dim, heads=c.model.heads, layers=c.model.layers,
                             max_seq_len=c.model.max_seq_len)
            model.load_state_dict(state["model"])
            model.eval()
            log.info("step %d: %s", state["step"], evaluate(model, hist, hist_len, target, cfg["eval"], c.data.n_items))
        time.sleep(args.poll)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
