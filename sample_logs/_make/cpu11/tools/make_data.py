#!/usr/bin/env python
"""Write a synthetic 10-class image set as pre-normalized float16 shards (class = colour blob position)."""
import argparse
import json
import os

import numpy as np


def make_split(out, n_shards, per_shard, size, chans, classes, seed):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    shards = []
    for s in range(n_shards):
        y = rng.integers(0, classes, per_shard)
        x = rng.normal(0, 0.5, (per_shard, chans, size, size)).astype(np.float32)
        for i, c in enumerate(y):
            r, q = divmod(int(c), 4)
            x[i, c % chans, r * size // 4:(r + 1) * size // 4, q * size // 4:(q + 1) * size // 4] += 2.0
        np.save(os.path.join(out, f"images_{s:04d}.npy"), x.astype(np.float16))
        np.save(os.path.join(out, f"labels_{s:04d}.npy"), y.astype(np.int64))
        shards.append({"images": f"images_{s:04d}.npy", "labels": f"labels_{s:04d}.npy", "count": per_shard})
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"shards": shards, "image_size": size, "channels": chans}, f, indent=1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="data/synthetic")
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--train-shards", type=int, default=8)
    p.add_argument("--per-shard", type=int, default=128)
    a = p.parse_args()
    make_split(os.path.join(a.out, "train"), a.train_shards, a.per_shard, a.size, 3, 10, 1)
    make_split(os.path.join(a.out, "val"), 2, 64, a.size, 3, 10, 2)
    print("wrote", a.out)
