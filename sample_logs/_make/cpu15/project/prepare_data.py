#!/usr/bin/env python
"""Generate the synthetic IMU activity data set: per-worker .npz train shards, a val file, parquet + stats."""
import argparse
import json
import os

import numpy as np

ACTIVITIES = ["walking", "running", "sitting", "standing", "stairs_up", "stairs_down"]


def make_windows(rng, n, seq_len, n_features, n_classes):
    y = rng.integers(0, n_classes, size=n)
    t = np.linspace(0, 2 * np.pi, seq_len, dtype=np.float32)
    freq = 0.5 + y[:, None, None] * 0.6
    phase = rng.uniform(0, np.pi, size=(n, 1, n_features))
    amp = 0.5 + 0.2 * ((np.arange(n_features)[None, None, :] + y[:, None, None]) % 3)
    x = amp * np.sin(freq * t[None, :, None] + phase) + 0.6 * rng.standard_normal((n, seq_len, n_features))
    return x.astype(np.float32), y.astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--only-shard", type=int, default=None, help="regenerate one shard only")
    ap.add_argument("--windows-per-shard", type=int, default=1536)
    ap.add_argument("--val-windows", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--parquet-files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    os.makedirs(f"{a.out}/train", exist_ok=True)
    os.makedirs(f"{a.out}/val", exist_ok=True)
    shards = [a.only_shard] if a.only_shard is not None else range(a.shards)
    for s in shards:
        rng = np.random.default_rng(a.seed * 1000 + s)
        x, y = make_windows(rng, a.windows_per_shard, a.seq_len, a.features, len(ACTIVITIES))
        np.savez(f"{a.out}/train/shard-{s:05d}.npz", x=x, y=y)
        print(f"wrote {a.out}/train/shard-{s:05d}.npz x={x.shape}")
    if a.only_shard is not None:
        return

    rng = np.random.default_rng(a.seed * 1000 + 999)
    x, y = make_windows(rng, a.val_windows, a.seq_len, a.features, len(ACTIVITIES))
    np.savez(f"{a.out}/val/val.npz", x=x, y=y)
    print(f"wrote {a.out}/val/val.npz x={x.shape}")

    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(f"{a.out}/parquet", exist_ok=True)
    all_x = []
    per_file = a.windows_per_shard * a.shards // a.parquet_files
    for i in range(a.parquet_files):
        rng = np.random.default_rng(a.seed * 1000 + 500 + i)
        x, y = make_windows(rng, per_file, a.seq_len, a.features, len(ACTIVITIES))
        all_x.append(x)
        table = pa.table({"signal": list(x.reshape(len(x), -1)), "activity": y})
        pq.write_table(table, f"{a.out}/parquet/part-{i:05d}.parquet")
    allx = np.concatenate(all_x)
    stats = {"mean": allx.mean(axis=(0, 1)).tolist(), "std": allx.std(axis=(0, 1)).tolist(),
             "n_features": a.features, "seq_len": a.seq_len, "classes": ACTIVITIES}
    with open(f"{a.out}/stats.json", "w") as f:
        json.dump(stats, f, indent=1)
    print(f"wrote {a.parquet_files} parquet files and stats.json")


if __name__ == "__main__":
    main()
