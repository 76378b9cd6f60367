"""Datasets (chat SFT jsonl, packed .npy token shards), sampler and collate."""
import json
import logging
import math
import os
import re

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

logger = logging.getLogger(__name__)

IGNORE = -100


class ByteTokenizer:
    """UTF-8 bytes plus a handful of special tokens."""
    BOS, EOS, PAD, USER, ASSISTANT = 256, 257, 258, 259, 260

    def encode(self, text):
        return list(text.encode("utf-8", errors="replace"))

    def decode(self, ids):
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


# lines made only of words and single spaces are kept verbatim; anything else is
# normalised (markup, tables, ascii art)
_PLAIN_LINE = re.compile(r"^(\w+\s?)*$")
_WS = re.compile(r"[ \t]+")


def clean_text(text: str) -> str:
    out = []
    for line in text.split("\n"):
        if _PLAIN_LINE.match(line):
            out.append(line)
        else:
            out.append(_WS.sub(" ", line).strip())
    return "\n".join(out)


class ChatSFTDataset(Dataset):
    """jsonl with {"prompt": ..., "response": ...}; loss only on the response."""

    def __init__(self, path, tok: ByteTokenizer, max_seq_len=None, clean=False):
        self.tok, self.max_seq_len, self.clean = tok, max_seq_len, clean
        with open(path) as f:
            self.rows = [json.loads(l) for l in f if l.strip()]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        prompt, response = row["prompt"], row["response"]
        if self.clean:
            prompt, response = clean_text(prompt), clean_text(response)
        p = [self.tok.BOS, self.tok.USER] + self.tok.encode(prompt) + [self.tok.ASSISTANT]
        r = self.tok.encode(response) + [self.tok.EOS]
        ids = p + r
        labels = [IGNORE] * len(p) + r
        if self.max_seq_len:
            ids, labels = ids[: self.max_seq_len + 1], labels[: self.max_seq_len + 1]
        # next-token targets
        return {"input_ids": torch.tensor(ids[:-1]), "labels": torch.tensor(labels[1:])}


class PackedShardDataset(Dataset):
    """Fixed-length chunks from uint16 .npy shards listed in an index json."""

    def __init__(self, index_path, seq_len, rank=0, world_size=1, split_by="sample"):
        root = os.path.dirname(index_path)
        with open(index_path) as f:
            meta = json.load(f)
        shards = meta["shards"]
        if split_by == "shard":
            shards = shards[rank::world_size]
        self.seq_len = seq_len
        self.paths = [os.path.join(root, s["file"]) for s in shards]
        self.chunks = []
        for si, s in enumerate(shards):
            n = s["num_tokens"] // (seq_len + 1)
            self.chunks += [(si, j * (seq_len + 1)) for j in range(n)]
        self._mm = {}

    def __len__(self):
        return len(self.chunks)

    def _shard(self, si):
        if si not in self._mm:
            self._mm[si] = np.load(self.paths[si], mmap_mode="r")
        return self._mm[si]

    def __getitem__(self, i):
        si, off = self.chunks[i]
        arr = np.asarray(self._shard(si)[off: off + self.seq_len + 1], dtype=np.int64)
        x = torch.from_numpy(arr)
        return {"input_ids": x[:-1], "labels": x[1:]}


class RankSampler(Sampler):
    """Strided split of an (optionally shuffled) index list across ranks; pads by wrapping."""

    def __init__(self, n, rank, world_size, shuffle=True, seed=0):
        self.n, self.rank, self.world_size = n, rank, world_size
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.num_samples = math.ceil(n / world_size)

    def set_epoch(self, e):
        self.epoch = e

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            idx = torch.randperm(self.n, generator=g).tolist()
        else:
            idx = list(range(self.n))
        total = self.num_samples * self.world_size
        idx += idx[: total - len(idx)]
        return iter(idx[self.rank: total: self.world_size])

    def __len__(self):
        return self.num_samples


class PadCollator:
    def __init__(self, pad_id, multiple=8):
        self.pad_id, self.multiple = pad_id, multiple

    def __call__(self, batch):
        L = max(len(b["input_ids"]) for b in batch)
        if self.multiple:
            L = int(math.ceil(L / self.multiple) * self.multiple)
        ids = torch.full((len(batch), L), self.pad_id, dtype=torch.long)
        labels = torch.full((len(batch), L), IGNORE, dtype=torch.long)
        for i, b in enumerate(batch):
            n = len(b["input_ids"])
            ids[i, :n] = b["input_ids"]
            labels[i, :n] = b["labels"]
        return {"input_ids": ids, "labels": labels}


def build_loader(cfg, path, tok, info, batch_size, train=True, max_seq_len=None):
    d = cfg.data
    if d.kind == "sft":
        ds = ChatSFTDataset(path, tok, max_seq_len=max_seq_len, clean=d.clean_text)
        collate = PadCollator(tok.PAD, d.pad_to_multiple_of)
    elif d.kind == "packed":
        ds = PackedShardDataset(path, d.seq_len, info.rank, info.world_size, d.split_by)
        collate = None  # fixed-length chunks: default_collate stacks them
    else:
        raise ValueError(f"unknown data.kind {d.kind!r}")
    if d.kind == "packed" and d.split_by == "shard":
        sampler = RankSampler(len(ds), 0, 1, shuffle=train and d.shuffle, seed=cfg.train.seed)
    else:
        sampler = RankSampler(len(ds), info.rank, info.world_size, shuffle=train and d.shuffle,
                              seed=cfg.train.seed)
    kw = dict(batch_size=batch_size, sampler=sampler, num_workers=d.num_workers,
              pin_memory=info.device.type == "cuda", drop_last=train, timeout=d.timeout)
    if collate is not None:
        kw["collate_fn"] = collate
    if d.num_workers > 0:
        kw["persistent_workers"] = train
        kw["prefetch_factor"] = 2
    return ds, DataLoader(ds, **kw)
