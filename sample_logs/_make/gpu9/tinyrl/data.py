"""Prompt shards (gzip JSON lines), a shard-affine distributed sampler and a left-padding collate."""
from __future__ import annotations

import bisect
import gzip
import json
import logging
import os

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

log = logging.getLogger("tinyrl.data")


class PromptShards(Dataset):
    """Map-style view over ``index.json`` + ``part-*.jsonl.gz``. Shards are read lazily, per worker."""

    def __init__(self, root: str):
        self.root = root
        with open(os.path.join(root, "index.json")) as f:
            self.index = json.load(f)
        self.files = [s["file"] for s in self.index["shards"]]
        rows = np.array([s["rows"] for s in self.index["shards"]], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(rows)])
        self._cache: dict[int, list] = {}

    def __len__(self):
        return int(self.offsets[-1])

    def shard_range(self, s: int) -> range:
        return range(int(self.offsets[s]), int(self.offsets[s + 1]))

    def _load(self, s: int) -> list:
        if s not in self._cache:
            with gzip.open(os.path.join(self.root, self.files[s]), "rt", encoding="utf-8") as f:
                self._cache[s] = [json.loads(line) for line in f if line.strip()]
        return self._cache[s]

    def __getitem__(self, i: int) -> dict:
        s = bisect.bisect_right(self.offsets, i) - 1
        row = i - self.offsets[s]
        rec = dict(self._load(s)[row])
        if rec.get("uid") is None:
            rec["uid"] = self.offsets[s] + row
        return rec


class ShardAffineSampler(Sampler):
    """Rank r reads shards r, r+W, ... (keeps each shard's page cache on one host); equal length per rank."""

    def __init__(self, ds: PromptShards, rank: int, world: int, shuffle: bool = False, seed: int = 0):
        self.ds, self.rank, self.world, self.shuffle, self.seed = ds, rank, world, shuffle, seed
        self.epoch = 0
        per_rank = []
        for r in range(world):
            idx = []
            for s in range(r, len(ds.files), world):
                idx.extend(ds.shard_range(s))
            per_rank.append(idx)
        self.num_samples = min(len(x) for x in per_rank)
        self.indices = per_rank[rank]

    def set_epoch(self, e: int):
        self.epoch = e

    def __iter__(self):
        idx = list(self.indices)
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            idx = [idx[i] for i in torch.randperm(len(idx), generator=g).tolist()]
        return iter(idx[: self.num_samples])

    def __len__(self):
        return self.num_samples


class LeftPadCollate:
    def __init__(self, pad_id: int, bos_id: int):
        self.pad_id, self.bos_id = pad_id, bos_id

    def __call__(self, batch: list) -> dict:
        seqs = [[self.bos_id] + list(r["prompt"]) for r in batch]
        T = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, T - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, T - len(s):] = 1
        return {"input_ids": ids, "attention_mask": mask, "records": batch}
