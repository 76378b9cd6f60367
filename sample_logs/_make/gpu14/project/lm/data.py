"""Pre-tokenized token shards (flat uint16 files written by prepare_data.py)."""
from __future__ import annotations

import json
import logging
import os
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from .config import DataConfig
from .model import IGNORE_INDEX

logger = logging.getLogger(__name__)


def read_meta(path: str) -> dict:
    with open(os.path.join(path, "meta.json")) as fh:
        return json.load(fh)


class PackedTokens(Dataset):
    """Contiguous windows of seq_len + 1 tokens; documents are packed across EOS."""

    def __init__(self, file: str, dtype: str, seq_len: int):
        self.file, self.dtype, self.seq_len = file, dtype, seq_len
        self.tokens = np.memmap(file, dtype=np.dtype(dtype), mode="r")
        self.n = (len(self.tokens) - 1) // seq_len

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        start = i * self.seq_len
        chunk = np.asarray(self.tokens[start : start + self.seq_len + 1], dtype=np.int64)
        return torch.from_numpy(chunk)


class Documents(Dataset):
    """One sample per document (split on EOS), truncated to max_seq_len + 1 tokens."""

    def __init__(self, file: str, dtype: str, eos_id: int, max_seq_len: int):
        self.tokens = np.memmap(file, dtype=np.dtype(dtype), mode="r")
        ends = np.flatnonzero(np.asarray(self.tokens) == eos_id)
        starts = np.concatenate([[0], ends[:-1] + 1])
        keep = ends - starts >= 8
        self.starts, self.ends = starts[keep], ends[keep]
        self.max_seq_len = max_seq_len

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> torch.Tensor:
        s, e = int(self.starts[i]), int(self.ends[i]) + 1
        e = min(e, s + self.max_seq_len + 1)
        return torch.from_numpy(np.asarray(self.tokens[s:e], dtype=np.int64))


def collate(batch: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(t) for t in batch)
    x = torch.full((len(batch), longest - 1), pad_id, dtype=torch.long)
    y = torch.full((len(batch), longest - 1), IGNORE_INDEX, dtype=torch.long)
    for i, t in enumerate(batch):
        x[i, : len(t) - 1] = t[:-1]
        y[i, : len(t) - 1] = t[1:]
    return x, y


class _Collate:
    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, batch):
        return collate(batch, self.pad_id)


def _dataset(cfg: DataConfig, meta: dict, file: str, seq_len: int) -> Dataset:
    path = os.path.join(cfg.path, file)
    if cfg.mode == "packed":
        return PackedTokens(path, meta["dtype"], seq_len)
    if cfg.mode == "documents":
        return Documents(path, meta["dtype"], meta["eos_id"], cfg.max_seq_len)
    raise ValueError(f"unknown data.mode {cfg.mode!r} (expected 'packed' or 'documents')")


def build_train_loader(cfg: DataConfig, seq_len: int, batch_size: int, rank: int, seed: int) -> DataLoader:
    meta = read_meta(cfg.path)
    shards = meta["train"]
    file = shards[rank % len(shards)]
    ds = _dataset(cfg, meta, file, seq_len)
    logger.info("train shard %s: %d samples (%s mode)", file, len(ds), cfg.mode)
    gen = torch.Generator().manual_seed(seed + rank)
    return DataLoader(
        ds,
        batch_size=batch_size,
        sampler=RandomSampler(ds, generator=gen),
        num_workers=cfg.num_workers,
        pin_memory=cfg.pin_memory,
        drop_last=True,
        collate_fn=_Collate(meta["eos_id"]),
        persistent_workers=cfg.num_workers > 0,
    )


def build_val_loader(cfg: DataConfig, seq_len: int, batch_size: int, rank: int) -> DataLoader:
    meta = read_meta(cfg.path)
    shards = meta["val"]
    file = shards[rank % len(shards)]
    ds = _dataset(cfg, meta, file, seq_len)
    logger.info("val shard %s: %d samples", file, len(ds))
    return DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=0,
                      drop_last=True, collate_fn=_Collate(meta["eos_id"]))


def forever(loader: DataLoader) -> Iterator:
    epoch = 0
    while True:
        for batch in loader:
            yield batch
        epoch += 1
        logger.info("finished pass %d over the train shard", epoch)
