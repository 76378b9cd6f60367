"""Sharded on-disk datasets (log-mel utterances or 32x32 images) and their loaders."""

from __future__ import annotations

import glob
import logging
import os
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler

from . import native

log = logging.getLogger("kws.data")


def list_shards(root, split):
    shards = sorted(glob.glob(os.path.join(root, split, "shard-*")))
    if not shards:
        raise FileNotFoundError(f"no shards under {os.path.join(root, split)}")
    return shards


class ShardDataset(Dataset):
    """Concatenation of shard directories.

    speech shard: x.npy [sum(T), n_mels] float16, lens.npy [N] int32, y.npy [N] int64
    image shard:  x.npy [N, 3, 32, 32] uint8,                         y.npy [N] int64
    """

    def __init__(self, shards, task, train, crop_frames=0, cache=False, frontend="numpy"):
        self.task, self.train, self.crop = task, train, crop_frames
        self.cache = {} if cache else None
        self.frontend = frontend
        xs, ys, lens = [], [], []
        for sd in shards:
            xs.append(np.load(os.path.join(sd, "x.npy")))
            ys.append(np.load(os.path.join(sd, "y.npy")))
            if task == "speech":
                lens.append(np.load(os.path.join(sd, "lens.npy")))
        self.y = np.concatenate(ys)
        if task == "speech":
            # shards stay separate arrays (no concatenated copy); (shard, offset) per utterance
            self.x = xs
            self.lens = np.concatenate(lens).astype(np.int64)
            self.shard_of = np.concatenate([np.full(len(l), k) for k, l in enumerate(lens)])
            self.offsets = np.concatenate([np.concatenate([[0], np.cumsum(l)[:-1]]) for l in lens])
        else:
            self.x = np.concatenate(xs)
            self.lens = None

    def __len__(self):
        return len(self.y)

    def _decode(self, i):
        off, n = int(self.offsets[i]), int(self.lens[i])
        raw = np.ascontiguousarray(self.x[self.shard_of[i]][off:off + n], dtype=np.float32)
        if self.frontend == "native":
            return native.smooth_cmvn(raw)
        feat = raw - raw.mean(axis=0, keepdims=True)
        return feat / (raw.std(axis=0, keepdims=True) + 1e-5)

    def __getitem__(self, i):
        label = int(self.y[i])
        if self.task == "image":
            img = torch.from_numpy(self.x[i].astype(np.float32) / 255.0)
            img = (img - 0.5) / 0.25
            if self.train and random.random() < 0.5:
                img = img.flip(-1)
            return img, label
        if self.cache is not None and i in self.cache:
            feat = self.cache[i]
        else:
            feat = self._decode(i)
            if self.cache is not None:
                self.cache[i] = feat
        if self.train and self.crop and feat.shape[0] > self.crop:
            s = random.randint(0, feat.shape[0] - self.crop)
            feat = feat[s:s + self.crop]
        return torch.from_numpy(np.array(feat, copy=True)), label


def collate(batch):
    xs, ys = zip(*batch)
    if xs[0].dim() == 3:  # images
        return torch.stack(xs), None, torch.tensor(ys)
    lens = torch.tensor([x.shape[0] for x in xs])
    feats = torch.zeros(len(xs), int(lens.max()), xs[0].shape[1])
    for k, x in enumerate(xs):
        feats[k, : x.shape[0]] = x
    return feats, lens, torch.tensor(ys)


class MaxFramesBatchSampler(Sampler):
    """Length-bucketed dynamic batches: padded frames per batch <= max_frames."""

    def __init__(self, lens, max_frames, shuffle=True, seed=0):
        self.lens, self.max_frames, self.shuffle, self.seed = lens, max_frames, shuffle, seed
        self.epoch = 0

    def _batches(self):
        order = np.argsort(self.lens, kind="stable")
        batches, cur, cur_max = [], [], 0
        for i in order:
            n = int(self.lens[i])
            if cur and max(cur_max, n) * (len(cur) + 1) > self.max_frames:
                batches.append(cur)
                cur, cur_max = [], 0
            cur.append(int(i))
            cur_max = max(cur_max, n)
        if cur:
            batches.append(cur)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(batches)
        return batches

    def __iter__(self):
        yield from self._batches()
        self.epoch += 1

    def __len__(self):
        return len(self._batches())


def make_loader(ds, cfg_data, train, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    common = dict(collate_fn=collate, num_workers=cfg_data.num_workers,
                  persistent_workers=bool(cfg_data.num_workers) and train)
    if ds.task == "speech" and cfg_data.get("max_frames"):
        bs = MaxFramesBatchSampler(ds.lens, cfg_data.max_frames, shuffle=train, seed=seed)
        return DataLoader(ds, batch_sampler=bs, **common)
    sampler = RandomSampler(ds, generator=g) if train else SequentialSampler(ds)
    return DataLoader(ds, batch_size=cfg_data.batch_size, sampler=sampler,
                      drop_last=train, **common)


def infinite(loader):
    while True:
        yield from loader
