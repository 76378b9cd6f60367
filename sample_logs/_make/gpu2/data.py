"""JSONL token-shard dataset.

Each shard is a ``.jsonl`` file with one document per line: ``{"id": ..., "ids": [int, ...]}``.
Train shards are ``train-XXXXX-of-YYYYY.jsonl`` and validation shards ``val-XXXXX-of-YYYYY.jsonl``;
rank ``r`` of ``w`` reads the shards whose index ``i`` satisfies ``i % w == r`` (pre-shuffled
shards, read sequentially).
"""

from __future__ import annotations

import glob
import json
import os

import torch
from torch.utils.data import Dataset

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
IGNORE_INDEX = -100


def list_shards(data_dir: str, split: str) -> list[str]:
    paths = sorted(glob.glob(os.path.join(data_dir, f"{split}-*.jsonl")))
    if not paths:
        raise FileNotFoundError(f"no {split} shards found under {data_dir!r}")
    return paths


def shards_for_rank(paths: list[str], rank: int, world_size: int) -> list[str]:
    mine = [p for i, p in enumerate(paths) if i % world_size == rank]
    if not mine:
        raise ValueError(f"rank {rank} got no shards ({len(paths)} shards for world size {world_size})")
    return mine


class JsonlShardDataset(Dataset):
    """Random access over JSONL shards through a byte-offset index built at start-up."""

    def __init__(self, paths: list[str]):
        self.paths = list(paths)
        self.index: list[tuple[int, int, int]] = []  # (file no, offset, length)
        for fno, path in enumerate(self.paths):
            with open(path, "rb") as f:
                off = 0
                for line in f:
                    if line.strip():
                        self.index.append((fno, off, len(line)))
                    off += len(line)
        self._handles: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.index)

    def _fh(self, fno: int):
        fh = self._handles.get(fno)
        if fh is None:
            fh = open(self.paths[fno], "rb")
            self._handles[fno] = fh
        return fh

    def __getitem__(self, i: int) -> torch.Tensor:
        fno, off, length = self.index[i]
        fh = self._fh(fno)
        fh.seek(off)
        record = json.loads(fh.read(length))
        return torch.tensor(record["ids"], dtype=torch.long)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_handles"] = {}
        return state


def collate_batch(samples: list[torch.Tensor], max_seq_len: int, pad_to_multiple_of: int = 8) -> dict:
    """Right-pad a list of documents into (input_ids, labels) for next-token prediction."""
    if max_seq_len > 0:
        samples = [s[: max_seq_len + 1] for s in samples]
    longest = max(int(s.numel()) - 1 for s in samples)
    T = max(longest, 1)
    if pad_to_multiple_of > 1:
        T = ((T + pad_to_multiple_of - 1) // pad_to_multiple_of) * pad_to_multiple_of
    B = len(samples)
    input_ids = torch.full((B, T), PAD_ID, dtype=torch.long)
    labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
    for i, s in enumerate(samples):
        n = int(s.numel()) - 1
        if n > 0:
            input_ids[i, :n] = s[:-1]
            labels[i, :n] = s[1:]
    return {"input_ids": input_ids, "labels": labels}
