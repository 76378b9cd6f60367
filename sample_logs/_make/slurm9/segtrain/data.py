"""Train shards: raw uint8 image/mask stacks (memory-mapped); val: whole images as .npy + sidecar json."""
import glob
import json
import os

import numpy as np
import torch


class ShardSet(torch.utils.data.Dataset):
    def __init__(self, root, rank, world, crop, pos_fraction, seed):
        with open(os.path.join(root, "meta.json")) as f:
            meta = json.load(f)
        n_shards = meta["shards"]
        self.h, self.w = meta["height"], meta["width"]
        self.items = []
        self.maps = []
        for k in range(rank, n_shards, world):
            img = np.memmap(os.path.join(root, "shard_%02d.img.u8" % k), np.uint8, "r")
            msk = np.memmap(os.path.join(root, "shard_%02d.msk.u8" % k), np.uint8, "r")
            img = img.reshape(-1, self.h, self.w)
            msk = msk.reshape(-1, self.h, self.w)
            self.maps.append((img, msk))
            self.items += [(len(self.maps) - 1, i) for i in range(img.shape[0])]
        self.crop = crop
        self.pos_fraction = pos_fraction
        self.rng = np.random.default_rng(seed + rank)

    def __len__(self):
        return len(self.items)

    def _random_crop(self, img, msk):
        c = self.crop
        y = self.rng.integers(0, self.h - c + 1)
        x = self.rng.integers(0, self.w - c + 1)
        return img[y:y + c, x:x + c], msk[y:y + c, x:x + c]

    def __getitem__(self, idx):
        s, i = self.items[idx]
        img, msk = self.maps[s][0][i], self.maps[s][1][i]
        if self.rng.random() < self.pos_fraction:
            # positive crop: resample until the crop holds foreground
            while True:
                ci, cm = self._random_crop(img, msk)
                if cm.any():
                    break
        else:
            ci, cm = self._random_crop(img, msk)
        x = torch.from_numpy(np.ascontiguousarray(ci, dtype=np.float32) / 255.0)[None]
        y = torch.from_numpy(np.ascontiguousarray(cm).astype(np.int64))
        return x, y


class ValSet:
    def __init__(self, root, rank, world):
        files = sorted(glob.glob(os.path.join(root, "img_*.npy")))
        self.files = files[rank::world]

    def __iter__(self):
        for f in self.files:
            img = np.load(f)
            msk = np.load(f.replace("img_", "msk_"))
            with open(f.replace(".npy", ".json")) as fh:
                meta = json.load(fh)
            yield os.path.basename(f), img, msk, meta
