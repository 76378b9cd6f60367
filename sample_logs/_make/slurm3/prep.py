#!/usr/bin/env python
"""Pre-processing step: one srun task per raw part -> one training shard per part.

Keeps labelled rows only, standardises the features, writes shard_<part>.{x,y}.npy
into --out. Task 0 also writes meta.json.
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    task = int(os.environ.get("SLURM_PROCID", 0))
    ntasks = int(os.environ.get("SLURM_NTASKS", 1))
    tag = f"[prep {task}/{ntasks}]"
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()

    src = os.path.join(a.raw, f"part-{task:05d}")
    x = np.load(src + ".x.npy")
    y = np.load(src + ".y.npy")
    keep = y >= 0
    x, y = x[keep], y[keep]
    print(f"{tag} {os.path.basename(src)}: {keep.size} rows read, {int(keep.sum())} labelled", flush=True)
    if len(y):
        mu = x.mean(axis=(0, 1), keepdims=True)
        sd = x.std(axis=(0, 1), keepdims=True) + 1e-6
        stem = os.path.join(a.out, f"shard_{task:05d}")
        np.save(stem + ".x.npy", ((x - mu) / sd).astype(np.float32))
        np.save(stem + ".y.npy", y.astype(np.int64))
    if task == 0:
        with open(os.path.join(a.out, "meta.json"), "w") as f:
            json.dump({"feat_dim": int(x.shape[-1]), "seq_len": int(x.shape[1]), "num_classes": 8}, f)
    print(f"{tag} done in {time.time() - t0:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
