"""Streaming token shards: data/<split>/meta.json + shard_*.bin (raw token ids)."""
import json
import logging
import os
from functools import partial

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

log = logging.getLogger("lmtrain.data")


def read_meta(d):
    with open(os.path.join(d, "meta.json")) as f:
        return json.load(f)


class TokenStream(IterableDataset):
    """Each rank streams its own shards (round robin), each worker a subset of those."""

    def __init__(self, data_dir, seq_len, packing=True, max_doc_len=0, seed=0, loop=True):
        self.dir = data_dir
        self.meta = read_meta(data_dir)
        self.dtype = np.dtype(self.meta["dtype"])
        self.eos = int(self.meta["eos_id"])
        self.seq_len = seq_len
        self.packing = packing
        self.max_doc_len = max_doc_len
        self.seed = seed
        self.loop = loop
        rank = dist.get_rank() if dist.is_initialized() else 0
        world = dist.get_world_size() if dist.is_initialized() else 1
        self.rank, self.world = rank, world
        self.shards = sorted(self.meta["shards"])[rank::world]

    def _my_shards(self):
        wi = get_worker_info()
        if wi is None:
            return self.shards
        return self.shards[wi.id::wi.num_workers]

    def _open(self, name):
        return np.memmap(os.path.join(self.dir, name), dtype=self.dtype, mode="r")

    def _docs(self, toks):
        ends = np.flatnonzero(toks == self.eos)
        start = 0
        for e in ends:
            doc = toks[start:e + 1]
            start = e + 1
            if self.max_doc_len:
                doc = doc[: self.max_doc_len]
            if len(doc) > 1:
                yield doc

    def __iter__(self):
        epoch = 0
        while True:
            for name in self._my_shards():
                toks = self._open(name)
                if self.packing:
                    n = (len(toks) - 1) // self.seq_len
                    for i in range(n):
                        w = np.asarray(toks[i * self.seq_len: (i + 1) * self.seq_len + 1], dtype=np.int64)
                        yield torch.from_numpy(w)
                else:
                    for doc in self._docs(toks):
                        yield torch.from_numpy(np.asarray(doc, dtype=np.int64))
            epoch += 1
            if not self.loop:
                return


def collate(samples, pad_id=0, device=""):
    if all(s.numel() == samples[0].numel() for s in samples):
        batch = torch.stack(samples)
        x, y = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        mask = None
        ntok = y.numel()
    else:
        T = max(s.numel() for s in samples) - 1
        x = torch.full((len(samples), T), pad_id, dtype=torch.long)
        y = torch.full((len(samples), T), -100, dtype=torch.long)
        mask = torch.zeros((len(samples), T), dtype=torch.bool)
        for i, s in enumerate(samples):
            n = s.numel() - 1
            x[i, :n] = s[:-1]
            y[i, :n] = s[1:]
            mask[i, :n] = True
        ntok = int(mask.sum())
    out = {"input_ids": x, "labels": y, "attn_mask": mask, "num_tokens": ntok}
    if device:
        out = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in out.items()}
    return out


def build_loader(cfg, split="train"):
    d = cfg.data.train_dir if split == "train" else cfg.data.val_dir
    ds = TokenStream(d, cfg.data.seq_len, packing=cfg.data.packing, max_doc_len=cfg.data.max_doc_len,
                     seed=cfg.data.seed, loop=(split == "train"))
    nw = cfg.data.num_workers if split == "train" else 0
    kw = dict(prefetch_factor=cfg.data.prefetch_factor, persistent_workers=True) if nw > 0 else {}
    log.info("%s stream: %s, %d shard(s) on this rank, dtype=%s, seq_len=%d, packing=%s, workers=%d",
             split, d, len(ds.shards), ds.dtype, cfg.data.seq_len, cfg.data.packing, nw)
    return DataLoader(ds, batch_size=cfg.data.micro_batch_size, num_workers=nw,
                      collate_fn=partial(collate, pad_id=ds.eos, device=cfg.data.collate_device),
                      pin_memory=cfg.data.pin_memory and cfg.train.device == "cuda" and not cfg.data.collate_device,
                      **kw)
