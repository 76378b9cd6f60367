#!/usr/bin/env python
"""Writes synthetic pre-encoded VAE latents as .npz shards plus index.json.

    python tools/make_latents.py --out data/latents/train --shards 8 --per-shard 256
"""
import argparse
import json
import os

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--per-shard", type=int, default=256)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--latent-hw", type=int, nargs=2, default=[16, 16])
    p.add_argument("--num-classes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    protos = rng.normal(size=(a.num_classes, a.channels, 1, 1)).astype(np.float32)
    shards = []
    for s in range(a.shards):
        labels = rng.integers(0, a.num_classes, size=a.per_shard)
        h, w = a.latent_hw
        x = protos[labels] + 0.8 * rng.normal(size=(a.per_shard, a.channels, h, w)).astype(np.float32)
        name = f"shard-{s:05d}.npz"
        np.savez(os.path.join(a.out, name), latents=x.astype(np.float16), labels=labels.astype(np.int64))
        shards.append({"file": name, "num_samples": a.per_shard, "latent_hw": [h, w]})
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump({"shards": shards, "channels": a.channels, "scale_factor": 0.18215}, f, indent=1)
    print(f"wrote {a.shards} shards x {a.per_shard} to {a.out}")


if __name__ == "__main__":
    main()
