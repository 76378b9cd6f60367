#!/usr/bin/env python
"""Synthetic partitioned graph (stochastic block model with class-correlated features)."""
import argparse
import os

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--out", default="data")
ap.add_argument("--parts", type=int, default=4)
ap.add_argument("--nodes", type=int, default=4000)
ap.add_argument("--feats", type=int, default=128)
ap.add_argument("--classes", type=int, default=47)
ap.add_argument("--degree", type=int, default=15)
ap.add_argument("--halo", type=int, default=64)
ap.add_argument("--dense-part", type=int, default=-1)
ap.add_argument("--dense-degree", type=int, default=2000)
ap.add_argument("--label-shift-part", type=int, default=-1)
ap.add_argument("--wide-part", type=int, default=-1)
ap.add_argument("--no-halo-part", type=int, default=-1)
ap.add_argument("--manifest", action="store_true")
ap.add_argument("--stale-manifest-part", type=int, default=-1)
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
rng = np.random.default_rng(1234)
centers = rng.normal(size=(a.classes, a.feats)).astype(np.float32)
for p in range(a.parts):
    n = a.nodes
    labels = rng.integers(0, a.classes, n)
    nf = a.feats + (1 if p == a.wide_part else 0)
    feats = rng.normal(size=(n, nf)).astype(np.float32)
    feats[:, :a.feats] += 0.25 * centers[labels]
    d = a.dense_degree if p == a.dense_part else a.degree
    src = np.repeat(np.arange(n), d)
    same = rng.random(n * d) < 0.7
    by_class = [np.flatnonzero(labels == c) for c in range(a.classes)]
    dst = rng.integers(0, n, n * d)
    cls = labels[src]
    for c in range(a.classes):
        m = same & (cls == c)
        dst[m] = by_class[c][rng.integers(0, len(by_class[c]), m.sum())]
    order = np.argsort(src, kind="stable")
    indices = dst[order].astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
    if p == a.label_shift_part:
        labels = labels + 1  # 1-based export
    perm = rng.permutation(n)
    halo_out = np.sort(rng.choice(n, a.halo, replace=False)) if p != a.no_halo_part else np.zeros(0, np.int64)
    np.savez(os.path.join(a.out, f"part-{p:02d}.npz"), indptr=indptr, indices=indices, feats=feats,
             labels=labels, train_idx=perm[: int(0.8 * n)], val_idx=perm[int(0.8 * n):],
             halo_out=halo_out, halo_in=np.int64(a.halo))
if a.manifest:
    import hashlib
    with open(os.path.join(a.out, "MANIFEST"), "w") as f:
        for p in range(a.parts):
            name = f"part-{p:02d}.npz"
            h = hashlib.sha256(open(os.path.join(a.out, name), "rb").read()).hexdigest()
            if p == a.stale_manifest_part:
                h = hashlib.sha256(h.encode()).hexdigest()  # manifest written before a re-export
            f.write(f"{h}  {name}\n")
print("wrote", a.parts, "partitions to", a.out)
