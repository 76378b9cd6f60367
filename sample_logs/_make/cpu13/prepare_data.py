#!/usr/bin/env python
"""Synthesise a small 12-keyword corpus (8 kHz, 1 s clips) as .npz shards.

Each keyword is a short tone pattern with a class-specific pitch contour plus noise.
"""
import argparse
import json
import os

import numpy as np


def make_clips(rng, n, num_classes=12, sr=8000, seconds=1.0):
    t = np.arange(int(sr * seconds)) / sr
    labels = rng.integers(0, num_classes, n)
    wav = np.empty((n, t.size), dtype=np.int16)
    for i, c in enumerate(labels):
        f0 = 200 + 60 * c
        f1 = f0 * (1.0 + 0.05 * (c % 4))
        onset = rng.uniform(0.05, 0.35)
        env = np.exp(-((t - onset - 0.25) ** 2) / 0.02)
        sig = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t ** 2 / 2)) * env
        sig += 0.3 * rng.standard_normal(t.size)
        wav[i] = np.clip(sig * 8000, -32768, 32767).astype(np.int16)
    return wav, labels.astype(np.int16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-shards", type=int, default=4)
    ap.add_argument("--val-shards", type=int, default=2)
    ap.add_argument("--clips-per-shard", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    manifest = {}
    for split, n in (("train", args.train_shards), ("val", args.val_shards)):
        os.makedirs(os.path.join(args.out, split), exist_ok=True)
        for s in range(n):
            wav, lab = make_clips(rng, args.clips_per_shard if split == "train" else args.clips_per_shard // 2)
            path = os.path.join(args.out, split, f"shard-{s:05d}.npz")
            np.savez_compressed(path, wav=wav, label=lab)
            manifest[path] = int(len(lab))
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(manifest)} shards to {args.out}")


if __name__ == "__main__":
    main()
