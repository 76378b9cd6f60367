#!/usr/bin/env python
"""Synthetic image-classification shards: class-dependent oriented stripes and colour casts plus noise.

    python tools/make_images.py --out data/train --shards 4 --per-shard 512          # 40 px, cropped to 32
    python tools/make_images.py --out data/train --shards 1 --start 4 --classes 100   # append a shard

Writes images_XXXXX.npy (uint8, N x H x W x 3), labels.csv (file,row,label) and index.json.
--unlabeled FRAC marks that fraction of the new rows with label -1 (images without annotation).
"""
import argparse
import csv
import json
import os

import numpy as np


def make_images(n, size, n_classes, rng):
    labels = rng.integers(0, n_classes, n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    imgs = np.empty((n, size, size, 3), np.uint8)
    for i, c in enumerate(labels):
        theta = np.pi * (c % 10) / 10
        freq = 2 + (c // 10) % 4 + rng.random()
        phase = rng.random() * 2 * np.pi
        wave = np.sin(2 * np.pi * freq * (xx * np.cos(theta) + yy * np.sin(theta)) + phase)
        color = np.array([(c * 37) % 255, (c * 91) % 255, (c * 53) % 255], np.float32) / 255
        img = 0.5 + 0.35 * wave[..., None] * (0.5 + color) + 0.1 * rng.standard_normal((size, size, 3))
        imgs[i] = np.clip(img * 255, 0, 255).astype(np.uint8)
    return imgs, labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--per-shard", type=int, default=512)
    p.add_argument("--start", type=int, default=0, help="index of the first shard written (append)")
    p.add_argument("--size", type=int, default=40)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--unlabeled", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()

    os.makedirs(a.out, exist_ok=True)
    idx_path = os.path.join(a.out, "index.json")
    if a.start and os.path.exists(idx_path):
        with open(idx_path) as f:
            index = json.load(f)
    else:
        index = {"format": "vitrain-shards/1", "image_size": a.size, "labels": "labels.csv", "shards": []}
    lab_path = os.path.join(a.out, index["labels"])
    new_file = not (a.start and os.path.exists(lab_path))
    rng = np.random.default_rng(a.seed + a.start)
    with open(lab_path, "w" if new_file else "a", newline="") as f:
        w = csv.writer(f)
        if new_file:
            w.writerow(["file", "row", "label"])
        for s in range(a.start, a.start + a.shards):
            imgs, labels = make_images(a.per_shard, a.size, a.classes, rng)
            if a.unlabeled > 0:
                labels[rng.random(a.per_shard) < a.unlabeled] = -1
            name = f"images_{s:05d}.npy"
            np.save(os.path.join(a.out, name), imgs)
            for r, lab in enumerate(labels):
                w.writerow([name, r, int(lab)])
            index["shards"].append({"file": name, "count": a.per_shard})
    with open(idx_path, "w") as f:
        json.dump(index, f, indent=1)
    print(f"{a.out}: {len(index['shards'])} shards")


if __name__ == "__main__":
    main()
