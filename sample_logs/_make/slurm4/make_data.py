#!/usr/bin/env python
"""Write a small synthetic sharded data set (numpy only, no torch) for one scenario.

Run by run_all.sh before submission, outside the job; its output is not part of the job logs.

  speech: train/shard-NNN/{x.npy [sum T, n_mels] float16, lens.npy int32, y.npy int64}
  image:  train/shard-NNN/{x.npy [N, 3, 32, 32] uint8, y.npy int64}

Defects that some scenarios need (all per train shard index):
  --truncate K          cut shard K's x.npy to 55% of its bytes (interrupted copy)
  --nmels K:F           shard K was made with F mel bins instead of n_mels
  --empty K:FRAC        FRAC of shard K's utterances have zero frames
  --long K:FRAC:FRAMES  FRAC of shard K's utterances are FRAMES long (unsegmented recordings)
"""

import argparse
import os

import numpy as np


def speech_shard(rng, n, n_mels, classes, lo, hi, templates, empty=0.0, long=None):
    lens = rng.integers(lo, hi + 1, size=n).astype(np.int32)
    if empty:
        lens[rng.random(n) < empty] = 0
    if long:
        frac, frames = long
        sel = rng.random(n) < frac
        sel[0] = True
        lens[sel] = frames
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = np.empty((int(lens.sum()), n_mels), dtype=np.float16)
    off = 0
    for i in range(n):
        t = int(lens[i])
        if t:
            env = np.sin(np.linspace(0, np.pi, t))[:, None]
            tpl = templates[y[i]]
            if tpl.shape[0] != n_mels:
                tpl = np.interp(np.linspace(0, 1, n_mels), np.linspace(0, 1, tpl.shape[0]), tpl)
            x[off:off + t] = (rng.standard_normal((t, n_mels)) + 0.6 * env * tpl).astype(np.float16)
        off += t
    return {"x": x, "lens": lens, "y": y}


def image_shard(rng, n, classes, templates):
    y = rng.integers(0, classes, size=n).astype(np.int64)
    base = templates[y]  # [n, 3, 32, 32]
    x = np.clip(base + rng.normal(0, 40, size=base.shape), 0, 255).astype(np.uint8)
    return {"x": x, "y": y}


def write(dirpath, arrays):
    os.makedirs(dirpath, exist_ok=True)
    for k, v in arrays.items():
        np.save(os.path.join(dirpath, f"{k}.npy"), v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--task", choices=["speech", "image"], default="speech")
    p.add_argument("--train-shards", type=int, default=8)
    p.add_argument("--per-shard", type=int, default=256)
    p.add_argument("--val-shards", type=int, default=4)
    p.add_argument("--val-per-shard", type=int, default=128)
    p.add_argument("--n-mels", type=int, default=40)
    p.add_argument("--classes", type=int, default=12)
    p.add_argument("--frames", default="60:160")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--truncate", type=int, action="append", default=[])
    p.add_argument("--nmels", action="append", default=[])
    p.add_argument("--empty", action="append", default=[])
    p.add_argument("--long", action="append", default=[])
    a = p.parse_args()

    rng = np.random.default_rng(a.seed)
    lo, hi = map(int, a.frames.split(":"))
    nmels = {int(k): int(v) for k, v in (s.split(":") for s in a.nmels)}
    empty = {int(k): float(v) for k, v in (s.split(":") for s in a.empty)}
    long = {int(s.split(":")[0]): (float(s.split(":")[1]), int(s.split(":")[2])) for s in a.long}

    if a.task == "speech":
        templates = rng.standard_normal((a.classes, a.n_mels))
    else:
        templates = rng.uniform(40, 215, size=(a.classes, 3, 1, 1)) * np.ones((1, 1, 32, 32))
        templates[:, :, ::4, :] += rng.uniform(-30, 30, size=(a.classes, 3, 1, 1))

    for split, nshards, per in (("train", a.train_shards, a.per_shard), ("val", a.val_shards, a.val_per_shard)):
        for k in range(nshards):
            d = os.path.join(a.out, split, f"shard-{k:03d}")
            if a.task == "speech":
                is_train = split == "train"
                arr = speech_shard(
                    rng, per, nmels.get(k, a.n_mels) if is_train else a.n_mels, a.classes, lo, hi, templates,
                    empty=empty.get(k, 0.0) if is_train else 0.0, long=long.get(k) if is_train else None,
                )
            else:
                arr = image_shard(rng, per, a.classes, templates)
            write(d, arr)
            if split == "train" and k in a.truncate:
                fx = os.path.join(d, "x.npy")
                size = os.path.getsize(fx)
                with open(fx, "r+b") as fh:
                    fh.truncate(int(size * 0.55))
    print(f"wrote {a.task} data to {a.out}")


if __name__ == "__main__":
    main()
