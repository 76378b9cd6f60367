"""Image shards on disk: index.json + images_XXXXX.npy (uint8, N x H x W x 3) + labels.csv."""
from __future__ import annotations

import csv
import json
import logging
import math
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler

log = logging.getLogger(__name__)


def read_index(root):
    with open(os.path.join(root, "index.json")) as f:
        index = json.load(f)
    labels = {}
    with open(os.path.join(root, index.get("labels", "labels.csv")), newline="") as f:
        for row in csv.DictReader(f):
            labels.setdefault(row["file"], []).append(int(row["label"]))
    return index, labels


class ImageShards(Dataset):
    """Images are memory-mapped lazily, in the process that reads them (DataLoader workers)."""

    def __init__(self, root, shard_ids=None, train=True, crop=32, pad=4, hflip=True, aug_device="cpu"):
        self.root = root
        index, labels = read_index(root)
        shards = index["shards"]
        if shard_ids is not None:
            shards = [shards[i] for i in shard_ids]
        self.files = [s["file"] for s in shards]
        self.items = []      # (shard position, row)
        self.labels = []
        for si, s in enumerate(shards):
            lab = labels[s["file"]]
            for row in range(s["count"]):
                self.items.append((si, row))
                self.labels.append(lab[row])
        self.train, self.crop, self.pad, self.hflip = train, crop, pad, hflip
        self.aug_device = torch.device(aug_device)
        self._arrays = {}

    def __len__(self):
        return len(self.items)

    def _array(self, si):
        arr = self._arrays.get(si)
        if arr is None:
            arr = np.load(os.path.join(self.root, self.files[si]), mmap_mode="r")
            self._arrays[si] = arr
        return arr

    def _augment_numpy(self, img, rng):
        H, W, _ = img.shape
        if self.train:
            p = self.pad
            img = np.pad(img, ((p, p), (p, p), (0, 0)), mode="reflect")
            top, left = rng.integers(0, img.shape[0] - self.crop + 1), rng.integers(0, img.shape[1] - self.crop + 1)
            img = img[top:top + self.crop, left:left + self.crop]
            if self.hflip and rng.random() < 0.5:
                img = img[:, ::-1]
        elif (H, W) != (self.crop, self.crop):
            top, left = (H - self.crop) // 2, (W - self.crop) // 2
            img = img[top:top + self.crop, left:left + self.crop]
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))

    def _augment_torch(self, img, rng):
        t = torch.from_numpy(np.ascontiguousarray(img)).to(self.aug_device).permute(2, 0, 1)
        if self.train:
            p = self.pad
            t = torch.nn.functional.pad(t[None].float(), (p, p, p, p), mode="reflect")[0]
            top, left = int(rng.integers(0, t.shape[1] - self.crop + 1)), int(rng.integers(0, t.shape[2] - self.crop + 1))
            t = t[:, top:top + self.crop, left:left + self.crop]
            if self.hflip and rng.random() < 0.5:
                t = t.flip(-1)
            t = t.round().to(torch.uint8)
        return t.contiguous().cpu()

    def __getitem__(self, i):
        si, row = self.items[i]
        img = self._array(si)[row]
        rng = np.random.default_rng((torch.initial_seed() + i) % 2**32)
        if self.aug_device.type == "cpu":
            x = self._augment_numpy(img, rng)
        else:
            x = self._augment_torch(img, rng)
        return x, self.labels[i]


class LocalShuffleSampler(Sampler):
    """Shuffles the indices of the shards this rank owns (data.partition=shard)."""

    def __init__(self, n, seed=0):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self):
        return self.n


def build_train_loader(dcfg, acfg, rank, world, seed, device):
    index, _ = read_index(dcfg.root)
    n_shards = len(index["shards"])
    if dcfg.partition == "shard":
        mine = list(range(rank, n_shards, world))
        ds = ImageShards(dcfg.root, mine, train=True, crop=dcfg.img_size, pad=acfg.crop_pad, hflip=acfg.hflip,
                         aug_device=dcfg.aug_device)
        sampler = LocalShuffleSampler(len(ds), seed)
        log.info("train data: shards %s of %d, %d images", mine, n_shards, len(ds))
    else:
        ds = ImageShards(dcfg.root, None, train=True, crop=dcfg.img_size, pad=acfg.crop_pad, hflip=acfg.hflip,
                         aug_device=dcfg.aug_device)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
        log.info("train data: %d shards, %d images, %d per rank", n_shards, len(ds), len(sampler))
    pin = dcfg.pin_memory and torch.device(device).type == "cuda"
    loader = DataLoader(ds, batch_size=dcfg.batch_size, sampler=sampler, num_workers=dcfg.num_workers,
                        pin_memory=pin, drop_last=True, persistent_workers=dcfg.num_workers > 0)
    return loader, sampler


def build_val_loader(dcfg, ecfg, rank, world, device):
    ds = ImageShards(dcfg.val_root, None, train=False, crop=dcfg.img_size)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
    pin = dcfg.pin_memory and torch.device(device).type == "cuda"
    return DataLoader(ds, batch_size=ecfg.batch_size, sampler=sampler, num_workers=min(dcfg.num_workers, 1),
                      pin_memory=pin)


def steps_per_epoch(loader):
    return max(1, math.floor(len(loader)))
