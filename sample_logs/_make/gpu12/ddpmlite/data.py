"""Image shards: <dir>/index.json + shard_XXXXX.images.npy (uint8 NHWC) / shard_XXXXX.labels.npy (int64)."""
import bisect
import json
import logging
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

log = logging.getLogger("ddpmlite.data")


class ImageShards(Dataset):
    """Shards are opened lazily (np.load mmap) in whichever process reads them first."""

    def __init__(self, root, shard_ids=None, crop_size=0, hflip=True):
        with open(os.path.join(root, "index.json")) as f:
            index = json.load(f)
        shards = index["shards"]
        if shard_ids is not None:
            shards = [shards[i] for i in shard_ids]
        self.root = root
        self.shards = shards
        self.image_size = index["image_size"]
        self.num_classes = index["num_classes"]
        self.crop_size = crop_size
        self.hflip = hflip
        self.offsets = np.cumsum([0] + [s["count"] for s in shards]).tolist()
        self._open = {}

    def __len__(self):
        return self.offsets[-1]

    def _arrays(self, i):
        if i not in self._open:
            s = self.shards[i]
            images = np.load(os.path.join(self.root, s["images"]), mmap_mode="r")
            labels = np.load(os.path.join(self.root, s["labels"]), mmap_mode="r")
            self._open[i] = (images, labels)
        return self._open[i]

    def __getitem__(self, idx):
        i = bisect.bisect_right(self.offsets, idx) - 1
        images, labels = self._arrays(i)
        j = idx - self.offsets[i]
        img = torch.from_numpy(np.array(images[j], dtype=np.float32)).permute(2, 0, 1) / 127.5 - 1.0
        if self.crop_size:
            top, left = np.random.randint(0, self.image_size - self.crop_size + 1, size=2)
            img = img[:, top:top + self.crop_size, left:left + self.crop_size]
        if self.hflip and np.random.rand() < 0.5:
            img = img.flip(-1)
        return img, int(labels[j])


def build_loader(cfg, rank, world, seed, pin_memory=False):
    dc = cfg.data
    with open(os.path.join(dc.train_dir, "index.json")) as f:
        n_shards = len(json.load(f)["shards"])
    if dc.partition == "shard":
        ids = list(range(rank, n_shards, world))
        ds = ImageShards(dc.train_dir, ids, dc.crop_size, dc.hflip)
        sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=seed + rank, drop_last=True)
        log.info("data: %d images from shards %s (%d workers)", len(ds), ids, dc.num_workers)
    else:
        ds = ImageShards(dc.train_dir, None, dc.crop_size, dc.hflip)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
        log.info("data: %d images in %d shards, %d per rank (%d workers)", len(ds), n_shards, len(sampler),
                 dc.num_workers)
    loader = DataLoader(ds, batch_size=dc.batch_size, sampler=sampler, num_workers=dc.num_workers,
                        drop_last=True, pin_memory=pin_memory, persistent_workers=dc.num_workers > 0)
    return loader, sampler
