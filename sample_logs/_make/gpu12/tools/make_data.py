#!/usr/bin/env python
"""Synthetic class-conditional image dataset: <out>/index.json + shard_XXXXX.{images,labels}.npy.

Class k draws a soft blob of hue k on a gradient background; labels are 0..classes-1."""
import argparse
import json
import os

import numpy as np


def make_images(rng, n, size, classes):
    labels = rng.integers(0, classes, size=n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    imgs = np.empty((n, size, size, 3), dtype=np.uint8)
    for i, k in enumerate(labels):
        hue = 2 * np.pi * k / classes
        color = 0.5 + 0.5 * np.array([np.cos(hue), np.cos(hue - 2.094), np.cos(hue + 2.094)])
        cy, cx = rng.uniform(0.25, 0.75, size=2)
        r = rng.uniform(0.1, 0.25)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))[..., None]
        bg = (0.2 + 0.3 * yy)[..., None] * np.array([0.6, 0.7, 0.9])
        img = bg * (1 - blob) + color * blob + rng.normal(0, 0.03, size=(size, size, 3))
        imgs[i] = np.clip(img * 255, 0, 255).astype(np.uint8)
    return imgs, labels.astype(np.int64)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--per-shard", type=int, default=256)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first shard number (append to an existing dir)")
    p.add_argument("--label-base", type=int, default=0, help="first label id written (0 or 1)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    idx_path = os.path.join(a.out, "index.json")
    index = {"image_size": a.size, "num_classes": a.classes, "shards": []}
    if a.start and os.path.exists(idx_path):
        with open(idx_path) as f:
            index = json.load(f)
    rng = np.random.default_rng(a.seed + 1000 * a.start)
    for s in range(a.start, a.start + a.shards):
        imgs, labels = make_images(rng, a.per_shard, a.size, a.classes)
        base = f"shard_{s:05d}"
        np.save(os.path.join(a.out, base + ".images.npy"), imgs)
        np.save(os.path.join(a.out, base + ".labels.npy"), labels + a.label_base)
        index["shards"].append({"images": base + ".images.npy", "labels": base + ".labels.npy",
                                "count": a.per_shard})
    with open(idx_path, "w") as f:
        json.dump(index, f, indent=1)
    print(f"wrote {a.shards} shards x {a.per_shard} images ({a.size}px) to {a.out}")


if __name__ == "__main__":
    main()
