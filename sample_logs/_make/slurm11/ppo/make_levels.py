"""Generate per-rank grid-world level files: levels/level_<i>.json"""
import argparse
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", type=int, nargs="+", required=True, help="grid size of each level")
    ap.add_argument("--walls", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for i, size in enumerate(a.sizes):
        walls = set()
        while len(walls) < a.walls:
            w = tuple(int(x) for x in rng.integers(1, size - 1, size=2))
            walls.add(w)
        with open(os.path.join(a.out, f"level_{i}.json"), "w") as f:
            json.dump({"size": size, "walls": sorted(walls)}, f)
        print(f"wrote {a.out}/level_{i}.json size={size}")


if __name__ == "__main__":
    main()
