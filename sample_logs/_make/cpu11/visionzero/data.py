"""Pre-normalized float16 image shards (N,C,H,W) + int64 labels, read through np.memmap."""
from __future__ import annotations

import json
import logging
import math
import os

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

log = logging.getLogger(__name__)


class ShardedImageDataset(Dataset):
    def __init__(self, root: str, split: str):
        self.dir = os.path.join(root, split)
        with open(os.path.join(self.dir, "index.json")) as f:
            meta = json.load(f)
        self.shards = meta["shards"]
        self.offsets = np.cumsum([0] + [s["count"] for s in self.shards])
        self._mm = {}

    def __len__(self):
        return int(self.offsets[-1])

    def _open(self, i):
        if i not in self._mm:
            s = self.shards[i]
            self._mm[i] = (np.load(os.path.join(self.dir, s["images"]), mmap_mode="r"),
                           np.load(os.path.join(self.dir, s["labels"]), mmap_mode="r"))
        return self._mm[i]

    def __getitem__(self, idx):
        shard = int(np.searchsorted(self.offsets, idx, side="right") - 1)
        imgs, labels = self._open(shard)
        j = idx - self.offsets[shard]
        return torch.from_numpy(np.asarray(imgs[j], dtype=np.float32)), int(labels[j])


class ContiguousDistributedSampler(Sampler):
    """Each rank reads a contiguous slice of the dataset (shard-local reads), shuffled inside the slice."""

    def __init__(self, n: int, rank: int, world: int, shuffle=True, seed=0):
        per = math.ceil(n / world)
        self.lo, self.hi = rank * per, min(n, (rank + 1) * per)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, e):
        self.epoch = e

    def __len__(self):
        return self.hi - self.lo

    def __iter__(self):
        idx = np.arange(self.lo, self.hi)
        if self.shuffle:
            rng = np.random.default_rng(self.seed + self.epoch)
            rng.shuffle(idx)
        return iter(idx.tolist())


class MixupCutmixCollate:
    """Stacks a batch, builds smoothed one-hot targets and applies mixup or cutmix to the whole batch."""

    def __init__(self, num_classes, mixup_alpha, cutmix_alpha, prob, switch_prob, smoothing, train=True):
        self.k, self.ma, self.ca = num_classes, mixup_alpha, cutmix_alpha
        self.prob, self.switch, self.smooth, self.train = prob, switch_prob, smoothing, train

    def _onehot(self, y):
        off = self.smooth / self.k
        t = torch.full((y.numel(), self.k), off)
        t.scatter_(1, y.view(-1, 1), 1.0 - self.smooth + off)
        return t

    def __call__(self, samples):
        x = torch.stack([s[0] for s in samples])
        y = torch.tensor([s[1] for s in samples], dtype=torch.long)
        if not self.train:
            return {"image": x, "label": y}
        t = self._onehot(y)
        if np.random.rand() < self.prob:
            if self.ca > 0 and np.random.rand() < self.switch:
                lam = np.random.beta(self.ca, self.ca)
                H, W = x.shape[-2:]
                rh, rw = int(H * math.sqrt(1 - lam)), int(W * math.sqrt(1 - lam))
                cy, cx = np.random.randint(H), np.random.randint(W)
                y0, y1 = np.clip(cy - rh // 2, 0, H), np.clip(cy + rh // 2, 0, H)
                x0, x1 = np.clip(cx - rw // 2, 0, W), np.clip(cx + rw // 2, 0, W)
                x[:, :, y0:y1, x0:x1] = x.flip(0)[:, :, y0:y1, x0:x1]
                lam = 1 - (y1 - y0) * (x1 - x0) / (H * W)
            else:
                lam = np.random.beta(self.ma, self.ma)
                x = x * lam + x.flip(0) * (1 - lam)
            t = t * lam + t.flip(0) * (1 - lam)
        return {"image": x, "label": y, "target": t}


def worker_init(seed_base):
    def _init(worker_id):
        np.random.seed((seed_base + worker_id) % 2**32)
    return _init
