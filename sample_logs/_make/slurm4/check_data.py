#!/usr/bin/env python
"""Pre-flight data check run as its own job step: every shard present and readable, counts."""

import argparse
import glob
import json
import os
import sys

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--splits", default="train,val")
    a = p.parse_args()
    ok = True
    for split in a.splits.split(","):
        shards = sorted(glob.glob(os.path.join(a.root, split, "shard-*")))
        n_utt = 0
        for sd in shards:
            missing = [f for f in ("x.npy", "y.npy") if not os.path.exists(os.path.join(sd, f))]
            if missing:
                print(f"[check_data] {sd}: missing {missing}")
                ok = False
                continue
            y = np.load(os.path.join(sd, "y.npy"), mmap_mode="r")
            n_utt += len(y)
        print(f"[check_data] {split}: {len(shards)} shards, {n_utt} examples")
    print("[check_data] " + json.dumps({"root": a.root, "ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
