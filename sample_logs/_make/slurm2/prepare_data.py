#!/usr/bin/env python
"""Export a synthetic classification dataset as tinydata shards.

Also used by run_all.sh to produce the damaged datasets some scenarios need
(--shard-features / --drop-shard / --header-rows); nothing in the training
job's logs refers to these knobs.
"""
import argparse
import json
import os

import torch


def kv(s):
    k, v = s.split("=")
    return int(k), int(v)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard-features", type=kv, action="append", default=[],
                   help="IDX=F: write shard IDX with F features (older exporter)")
    p.add_argument("--drop-shard", type=int, action="append", default=[],
                   help="list shard IDX in meta.json but do not write its file")
    p.add_argument("--header-rows", type=kv, action="append", default=[],
                   help="IDX=N: record N rows for shard IDX in meta.json")
    a = p.parse_args()

    os.makedirs(a.out, exist_ok=True)
    g = torch.Generator().manual_seed(a.seed)
    teacher = torch.randn(a.features, a.num_classes, generator=g)
    feat_over = dict(a.shard_features)
    rows_over = dict(a.header_rows)
    shards = []
    for i in range(a.shards):
        f = feat_over.get(i, a.features)
        x = torch.randn(a.rows, f, generator=g)
        w = teacher[:f] if f <= a.features else torch.randn(f, a.num_classes, generator=g)
        y = (x @ w + 0.5 * torch.randn(a.rows, a.num_classes, generator=g)).argmax(dim=1)
        name = f"part-{i:05d}.bin"
        if i not in a.drop_shard:
            with open(os.path.join(a.out, name), "wb") as fh:
                fh.write(x.contiguous().numpy().tobytes())
                fh.write(y.to(torch.int64).numpy().tobytes())
        shards.append({"file": name, "num_rows": rows_over.get(i, a.rows), "features": f})
    meta = {"version": 3, "features": a.features, "num_classes": a.num_classes, "shards": shards}
    with open(os.path.join(a.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print(f"wrote {a.shards} shards to {a.out}")


if __name__ == "__main__":
    main()
