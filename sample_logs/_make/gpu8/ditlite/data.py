"""Pre-encoded VAE latent shards (.npz), a shard-aware distributed sampler, resolution buckets."""
from __future__ import annotations

import bisect
import glob
import json
import logging
import os
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

log = logging.getLogger("ditlite.data")


class LatentShards(Dataset):
    """Each shard is `shard-XXXXX.npz` with `latents` [N,C,h,w] (fp16) and `labels` [N];
    `index.json` lists shard names, sizes and latent resolution."""

    def __init__(self, root: str, hflip: bool = False):
        self.root = root
        with open(os.path.join(root, "index.json")) as f:
            meta = json.load(f)
        self.shards = meta["shards"]
        self.sizes = [s["num_samples"] for s in self.shards]
        self.res = [tuple(s["latent_hw"]) for s in self.shards]
        self.offsets = np.cumsum([0] + self.sizes).tolist()
        self.hflip = hflip
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self):
        return self.offsets[-1]

    def locate(self, idx):
        s = bisect.bisect_right(self.offsets, idx) - 1
        return s, idx - self.offsets[s]

    def _load(self, s):
        if s not in self._cache:
            if len(self._cache) >= 2:
                self._cache.pop(next(iter(self._cache)))
            with np.load(os.path.join(self.root, self.shards[s]["file"])) as z:
                latents = z["latents"]
                labels = z["labels"]
            self._cache[s] = (latents, labels)
        return self._cache[s]

    def __getitem__(self, idx):
        s, j = self.locate(idx)
        latents, labels = self._load(s)
        x = torch.from_numpy(latents[j].astype(np.float32))
        if self.hflip and random.random() < 0.5:
            x = x.flip(-1)
        return {"latent": x, "label": int(labels[j]), "key": torch.tensor([s, j])}


class ShardedDistributedSampler(Sampler):
    """Gives each rank whole shards (round robin) so a worker reads a shard sequentially;
    shuffles shard order and samples inside a shard with seed+epoch."""

    def __init__(self, ds: LatentShards, rank, world, shuffle=True, seed=0):
        self.ds, self.rank, self.world, self.shuffle, self.seed = ds, rank, world, shuffle, seed
        self.epoch = 0
        self.my_shards = list(range(len(ds.shards)))[rank::world]

    def set_epoch(self, e):
        self.epoch = e

    def __iter__(self):
        rng = random.Random(self.seed + self.epoch)
        order = list(self.my_shards)
        for s in order:
            idx = list(range(self.ds.offsets[s], self.ds.offsets[s + 1]))
            if self.shuffle:
                rng.shuffle(idx)
            yield from idx

    def __len__(self):
        return sum(self.ds.sizes[s] for s in self.my_shards)


class BucketBatchSampler(Sampler):
    """Batches only samples of one latent resolution (mixed-aspect datasets)."""

    def __init__(self, ds: LatentShards, sampler, batch_size, drop_last=True):
        self.ds, self.sampler, self.bs, self.drop_last = ds, sampler, batch_size, drop_last

    def __iter__(self):
        buckets: dict[tuple, list] = {}
        for i in self.sampler:
            r = self.ds.res[self.ds.locate(i)[0]]
            b = buckets.setdefault(r, [])
            b.append(i)
            if len(b) == self.bs:
                yield list(b)
                b.clear()
        if not self.drop_last:
            for b in buckets.values():
                if b:
                    yield b

    def __len__(self):
        return len(self.sampler) // self.bs


def collate(samples):
    return {
        "latent": torch.stack([s["latent"] for s in samples]),
        "label": torch.tensor([s["label"] for s in samples], dtype=torch.long),
        # (shard, row) of every sample, kept per sample: buckets may mix shards
        "keys": [s["key"] for s in samples],
    }


def build_loader(dcfg, batch_size, rank, world, seed, train=True):
    root = dcfg.train_dir if train else dcfg.val_dir
    ds = LatentShards(root, hflip=dcfg.hflip and train)
    sampler = ShardedDistributedSampler(ds, rank, world, shuffle=dcfg.shuffle and train, seed=seed)
    kw = dict(num_workers=dcfg.num_workers, collate_fn=collate,
              pin_memory=dcfg.pin_memory and torch.cuda.is_available(),
              persistent_workers=dcfg.num_workers > 0 and train)
    if dcfg.num_workers > 0:
        kw["prefetch_factor"] = dcfg.prefetch_factor
    if dcfg.bucket_by_resolution and train:
        bs = BucketBatchSampler(ds, sampler, batch_size, drop_last=dcfg.drop_last)
        loader = DataLoader(ds, batch_sampler=bs, drop_last=dcfg.drop_last, **kw)
    else:
        loader = DataLoader(ds, batch_size=batch_size, sampler=sampler, drop_last=dcfg.drop_last, **kw)
    log.info("%s data: %d shards, %d samples (%d on this rank), %d batches/epoch, workers=%d",
             "train" if train else "val", len(ds.shards), len(ds), len(sampler), len(loader), dcfg.num_workers)
    return loader
