#!/usr/bin/env python
"""Write the synthetic data set: data/train (uint8 shards + meta.json) and data/val (.npy + .json)."""
import argparse
import json
import os

import numpy as np

from synth import image_and_mask, shard


def idx_list(s):
    return [int(v) for v in s.split(",") if v]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="data")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--per-shard", type=int, default=64)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--border-shards", default="", help="shards whose masks carry a 255 'void' border")
    ap.add_argument("--empty-shards", default="", help="shards without foreground")
    ap.add_argument("--val", type=int, default=8)
    ap.add_argument("--val-hw", default="", help="i:H  size of val image i")
    ap.add_argument("--val-orig", default="", help="i:HxW original size of val image i")
    a = ap.parse_args()
    rng = np.random.default_rng(3)
    tr = os.path.join(a.root, "train")
    va = os.path.join(a.root, "val")
    os.makedirs(tr, exist_ok=True)
    os.makedirs(va, exist_ok=True)
    for k in range(a.shards):
        imgs, msks = shard(rng, a.per_shard, a.hw, a.hw, empty=k in idx_list(a.empty_shards))
        if k in idx_list(a.border_shards):
            msks[:, :9, :] = 255
            msks[:, -9:, :] = 255
            msks[:, :, :9] = 255
            msks[:, :, -9:] = 255
        imgs.tofile(os.path.join(tr, "shard_%02d.img.u8" % k))
        msks.tofile(os.path.join(tr, "shard_%02d.msk.u8" % k))
    with open(os.path.join(tr, "meta.json"), "w") as f:
        json.dump({"shards": a.shards, "height": a.hw, "width": a.hw, "classes": 3}, f)
    sizes = dict(v.split(":") for v in a.val_hw.split(",") if v)
    origs = dict(v.split(":") for v in a.val_orig.split(",") if v)
    for i in range(a.val):
        h = int(sizes.get(str(i), 128))
        img, msk = image_and_mask(rng, h, h, n_blobs=8)
        np.save(os.path.join(va, "img_%03d.npy" % i), img)
        np.save(os.path.join(va, "msk_%03d.npy" % i), msk)
        o = origs.get(str(i), "%dx%d" % (2 * h, 2 * h))
        with open(os.path.join(va, "img_%03d.json" % i), "w") as f:
            json.dump({"orig_size": [int(v) for v in o.split("x")], "source": "scan-%04d" % (1000 + i)}, f)


if __name__ == "__main__":
    main()
