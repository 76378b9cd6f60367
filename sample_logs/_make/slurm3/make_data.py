#!/usr/bin/env python
"""Synthetic data for the seqcls scenarios (run by run_all.sh before submitting, never by a job).

  make_data.py shards OUT --ranks N [--samples S] [--truncate R] [--inf R] [--small R:N]
  make_data.py files  OUT --samples S [--empty R:W]
  make_data.py raw    OUT --parts N [--rows S] [--unlabelled P]

The fault options plant what the scenario needs; the job logs never name them.
"""
import argparse
import json
import os

import numpy as np

T, FEAT, CLASSES = 8, 16, 8


def samples(rng, n):
    y = rng.integers(0, CLASSES, n)
    centers = np.random.default_rng(0).normal(0, 1, (CLASSES, FEAT)).astype(np.float32)
    x = rng.normal(0, 1, (n, T, FEAT)).astype(np.float32) + centers[y][:, None, :]
    return x, y.astype(np.int64)


def write_meta(out):
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"feat_dim": FEAT, "seq_len": T, "num_classes": CLASSES}, f)


def cmd_shards(a, rng):
    small = dict(tuple(map(int, s.split(":"))) for s in a.small)
    for r in range(a.ranks):
        n = small.get(r, a.samples)
        x, y = samples(rng, n)
        if r in a.inf:
            bad = rng.choice(n, max(1, n // 512), replace=False)
            x[bad, rng.integers(0, T), rng.integers(0, FEAT)] = np.inf
        stem = os.path.join(a.out, f"shard_{r:05d}")
        np.save(stem + ".x.npy", x)
        np.save(stem + ".y.npy", y)
        if r in a.truncate:  # copy interrupted half way (quota / node lost during rsync)
            p = stem + ".x.npy"
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) // 2)
    write_meta(a.out)


def cmd_files(a, rng):
    x, y = samples(rng, a.samples)
    names = [f"s{i:06d}.npy" for i in range(a.samples)]
    for n, xi in zip(names, x):
        np.save(os.path.join(a.out, n), xi)
    with open(os.path.join(a.out, "labels.csv"), "w") as f:
        f.write("# name,label\n")
        for n, yi in zip(names, y):
            f.write(f"{n},{yi}\n")
    for spec in a.empty:  # R:W -> empty one file that rank R of W will read
        r, w = map(int, spec.split(":"))
        victim = sorted(names)[r::w][len(names) // w // 3]
        open(os.path.join(a.out, victim), "w").close()
    write_meta(a.out)


def cmd_raw(a, rng):
    for p in range(a.parts):
        x, y = samples(rng, a.rows)
        if p in a.unlabelled:
            y[:] = -1
        np.save(os.path.join(a.out, f"part-{p:05d}.x.npy"), x)
        np.save(os.path.join(a.out, f"part-{p:05d}.y.npy"), y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["shards", "files", "raw"])
    p.add_argument("out")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--rows", type=int, default=1500)
    p.add_argument("--truncate", type=int, action="append", default=[])
    p.add_argument("--inf", type=int, action="append", default=[])
    p.add_argument("--small", action="append", default=[])
    p.add_argument("--empty", action="append", default=[])
    p.add_argument("--unlabelled", type=int, action="append", default=[])
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    {"shards": cmd_shards, "files": cmd_files, "raw": cmd_raw}[a.kind](a, rng)


if __name__ == "__main__":
    main()
