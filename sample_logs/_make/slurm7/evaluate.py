#!/usr/bin/env python
"""Full-neighbourhood (layer-wise) inference over all partitions from a checkpoint."""
import argparse
import glob
import os
import time

import numpy as np
import torch

from sage import ckpt, runtime
from sage.graph import Block, Partition
from sage.model import GraphSAGE


def layerwise(model, g, bs, mc):
    h = g.feats
    model.train(mc > 1)
    for li, conv in enumerate(model.convs):
        out = []
        for s in range(0, g.num_nodes, bs):
            nodes = np.arange(s, min(s + bs, g.num_nodes))
            st, en = g.indptr[nodes], g.indptr[nodes + 1]
            deg = en - st
            src = np.concatenate([g.indices[a:b] for a, b in zip(st, en)])
            dst = np.repeat(np.arange(len(nodes)), deg)
            allnodes = np.concatenate([nodes, src])
            blk = Block(None, len(nodes), torch.arange(len(nodes), len(allnodes)), torch.from_numpy(dst))
            acc = 0
            for _ in range(mc):
                acc = acc + conv(h[torch.from_numpy(allnodes)], blk)
            o = acc / mc
            if li < len(model.convs) - 1:
                o = torch.relu(o)
            out.append(o)
        h = torch.cat(out)
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--data", default="data")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--mc-samples", type=int, default=1)
    args = ap.parse_args()
    ri = runtime.RankInfo()
    log = runtime.setup_logging(ri)
    torch.set_num_threads(1)
    state = ckpt.load(args.ckpt)
    cfg = state["config"]
    log.info("checkpoint epoch %d step %d best %.4f", state["epoch"], state["step"], state["best"])
    parts = sorted(glob.glob(os.path.join(args.data, "part-*.npz")))
    correct = total = 0
    with torch.no_grad():
        for k in range(len(parts)):
            t0 = time.time()
            g = Partition(args.data, k)
            model = GraphSAGE(g.feats.shape[1], cfg["model"]["hidden"], cfg["data"]["num_classes"],
                              cfg["model"]["layers"], cfg["model"]["aggr"], cfg["model"]["dropout"])
            model.load_state_dict(state["model"])
            pred = layerwise(model, g, args.batch_size, args.mc_samples).argmax(1)
            vi = torch.from_numpy(g.val_idx)
            c = int((pred[vi] == g.labels[vi]).sum())
            correct += c
            total += len(vi)
            log.info("partition %d: acc %.4f (%.1fs)", k, c / max(len(vi), 1), time.time() - t0)
    log.info("overall val acc %.4f over %d nodes", correct / max(total, 1), total)


if __name__ == "__main__":
    main()
