import fcntl
import json
import logging
import os

import torch

log = logging.getLogger("tinydata")


def load_meta(data_dir):
    with open(os.path.join(data_dir, "meta.json")) as fh:
        return json.load(fh)


def shard_for_rank(meta, rank):
    shards = meta["shards"]
    return shards[rank % len(shards)]


class ShardReader:
    """Reads one shard fully into memory (shards are small enough to fit in host RAM)."""

    def __init__(self, data_dir, shard):
        self.path = os.path.join(data_dir, shard["file"])
        self.num_rows = int(shard["num_rows"])
        self.features = int(shard.get("features", 0))

    def load(self):
        # Take a shared lock so we never read a shard the exporter is rewriting.
        with open(self.path + ".lock", "a+") as lk:
            fcntl.flock(lk.fileno(), fcntl.LOCK_SH)
            try:
                return self._read()
            finally:
                fcntl.flock(lk.fileno(), fcntl.LOCK_UN)

    def _read(self):
        with open(self.path, "rb", buffering=0) as fh:
            # preallocate from the header so the read is a single readinto()
            x = torch.empty((self.num_rows, self.features), dtype=torch.float32)
            y = torch.empty((self.num_rows,), dtype=torch.int64)
            nx = fh.readinto(x.numpy())
            ny = fh.readinto(y.numpy())
        if nx != x.numel() * 4 or ny != y.numel() * 8:
            raise IOError(f"short read on {self.path}: got {nx}+{ny} bytes")
        return x, y
