"""Data access: per-rank .npz shards read with a torch DataLoader, or a Ray Data parquet pipeline."""
import json
import logging
import math
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("seqcls.data")


class WindowShard(Dataset):
    def __init__(self, path: str):
        with np.load(path) as z:
            self.x = torch.from_numpy(z["x"].astype(np.float32))
            self.y = torch.from_numpy(z["y"].astype(np.int64))
        log.info("loaded %s: %d windows, shape %s", os.path.basename(path), len(self.y), tuple(self.x.shape[1:]))

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class ValSlice(Dataset):
    """Contiguous slice of the validation file for one rank."""

    def __init__(self, path: str, rank: int, world: int):
        with np.load(path) as z:
            x, y = z["x"].astype(np.float32), z["y"].astype(np.int64)
        chunk = math.ceil(len(y) / world)
        lo, hi = rank * chunk, min(len(y), (rank + 1) * chunk)
        self.x, self.y = torch.from_numpy(x[lo:hi]), torch.from_numpy(y[lo:hi])

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def shard_loader(cfg: dict, rank: int, world: int) -> DataLoader:
    d = cfg["data"]
    shards = sorted(d["train_shards"])
    path = os.path.join(d["root"], shards[rank % len(shards)])
    ds = WindowShard(path)
    return DataLoader(ds, batch_size=d["batch_size"], shuffle=True, drop_last=True,
                      num_workers=d.get("num_workers", 0), generator=torch.Generator().manual_seed(cfg["seed"] + rank))


def val_loader(cfg: dict, rank: int, world: int) -> DataLoader:
    d = cfg["data"]
    ds = ValSlice(os.path.join(d["root"], d["val_file"]), rank, world)
    return DataLoader(ds, batch_size=d["batch_size"], shuffle=False)


# ---------------------------------------------------------------- Ray Data path
def load_stats(root: str) -> dict:
    with open(os.path.join(root, "stats.json")) as f:
        return json.load(f)


def build_ray_dataset(cfg: dict):
    import ray.data

    d = cfg["data"]
    stats = load_stats(d["root"])
    mean = np.asarray(stats["mean"], dtype=np.float32)
    std = np.asarray(stats["std"], dtype=np.float32)
    n_features, seq_len = stats["n_features"], stats["seq_len"]

    def preprocess(batch):
        flat = np.stack([np.asarray(v, dtype=np.float32) for v in batch["signal"]])
        x = flat.reshape(len(flat), seq_len, n_features)
        x = (x - mean) / std
        y = np.asarray([int(v) for v in batch["activity"]], dtype=np.int64)
        return {"x": x.reshape(len(flat), -1), "y": y}

    ds = ray.data.read_parquet(os.path.join(d["root"], d["parquet_dir"]))
    return ds.map_batches(preprocess, batch_format="numpy", batch_size=256)
