#!/usr/bin/env python
"""Write synthetic webdataset-style tar shards (NNNNNN.npy image, .txt caption, .cls label)
and an optional per-rank npy cache."""
from __future__ import annotations

import argparse
import io
import json
import os
import tarfile

import numpy as np

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black", "grey", "pink"]
SHAPES = ["circle", "square", "stripe", "cross", "dot", "ring", "grid", "wave", "star", "blob"]


def sample(rng, size):
    c = int(rng.integers(len(COLORS)))
    s = int(rng.integers(len(SHAPES)))
    img = rng.integers(0, 255, size=(size, size, 3), dtype=np.uint8)
    img[..., c % 3] = ((img[..., c % 3].astype(np.int32) // 2 + 25 * s) % 255).astype(np.uint8)
    caption = f"a photo of a {COLORS[c]} {SHAPES[s]} on a noisy background"
    return img, caption, s


def add(tf, name, data: bytes):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tf.addfile(ti, io.BytesIO(data))


def write_shard(path, rng, n, size, key0, label_offset=0):
    with tarfile.open(path, "w") as tf:
        for i in range(n):
            img, cap, lab = sample(rng, size)
            buf = io.BytesIO()
            np.save(buf, img)
            key = f"{key0 + i:06d}"
            add(tf, key + ".npy", buf.getvalue())
            add(tf, key + ".txt", cap.encode())
            add(tf, key + ".cls", str(lab + label_offset).encode())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="data")
    p.add_argument("--train-shards", type=int, default=8)
    p.add_argument("--per-shard", type=int, default=64)
    p.add_argument("--eval-samples", type=int, default=128)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--one-based-shards", default="", help="comma list of shards written with labels 1..N")
    p.add_argument("--npy-cache-ranks", type=int, default=0)
    p.add_argument("--npy-cache-samples", type=int, default=2048)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    one_based = {int(x) for x in a.one_based_shards.split(",") if x}
    os.makedirs(f"{a.out}/train", exist_ok=True)
    os.makedirs(f"{a.out}/eval", exist_ok=True)
    for s in range(a.train_shards):
        write_shard(f"{a.out}/train/shard-{s:04d}.tar", rng, a.per_shard, a.size, s * a.per_shard,
                    1 if s in one_based else 0)
    write_shard(f"{a.out}/eval/shard-0000.tar", rng, a.eval_samples, a.size, 900000)
    if a.npy_cache_ranks:
        os.makedirs(f"{a.out}/cache", exist_ok=True)
        for r in range(a.npy_cache_ranks):
            n = a.npy_cache_samples
            imgs = np.lib.format.open_memmap(f"{a.out}/cache/rank{r}.images.npy", mode="w+",
                                             dtype=np.uint8, shape=(n, a.size, a.size, 3))
            labels, caps = np.zeros(n, dtype=np.int64), []
            for i in range(n):
                imgs[i], cap, labels[i] = sample(rng, a.size)
                caps.append(cap)
            imgs.flush()
            del imgs
            np.save(f"{a.out}/cache/rank{r}.labels.npy", labels)
            with open(f"{a.out}/cache/rank{r}.captions.txt", "w") as fh:
                fh.write("\n".join(caps))
    with open(f"{a.out}/MANIFEST.json", "w") as fh:
        json.dump(vars(a), fh)


if __name__ == "__main__":
    main()
