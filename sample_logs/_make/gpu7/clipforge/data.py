"""Webdataset-style tar shards, a per-rank memmapped npy cache, sampler and collate."""
from __future__ import annotations

import io
import logging
import os
import random
import re
import tarfile
from typing import Dict, Iterator, List

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, get_worker_info

log = logging.getLogger("clipforge.data")

BOS, EOS, PAD = 256, 257, 0
MEAN = torch.tensor([0.481, 0.458, 0.408]).view(3, 1, 1)
STD = torch.tensor([0.269, 0.261, 0.276]).view(3, 1, 1)


def expand_braces(pattern: str) -> List[str]:
    m = re.search(r"\{(\d+)\.\.(\d+)\}", pattern)
    if not m:
        return [pattern]
    a, b = m.group(1), m.group(2)
    width = len(a)
    return [pattern[: m.start()] + str(i).zfill(width) + pattern[m.end():] for i in range(int(a), int(b) + 1)]


def tokenize(text: str, context_length: int) -> torch.Tensor:
    ids = [BOS] + list(text.encode("utf-8"))[: context_length - 2] + [EOS]
    out = torch.full((context_length,), PAD, dtype=torch.long)
    out[: len(ids)] = torch.tensor(ids)
    return out


def decode_image(raw: bytes, decoder: str) -> np.ndarray:
    if decoder == "turbojpeg":
        from turbojpeg import TJPF_RGB, TurboJPEG  # optional fast path
        return TurboJPEG().decode(raw, pixel_format=TJPF_RGB)
    return np.load(io.BytesIO(raw), allow_pickle=False)


def iter_tar_samples(path: str) -> Iterator[Dict[str, bytes]]:
    """Group consecutive tar members by key (`000123.npy`, `000123.txt`, `000123.cls`)."""
    current: Dict[str, bytes] = {}
    key = None
    with tarfile.open(path, mode="r") as tf:
        for member in tf:
            if not member.isfile():
                continue
            k, ext = member.name.rsplit(".", 1)
            if key is not None and k != key:
                yield current
                current = {}
            key = k
            current["__key__"] = k.encode()
            current[ext] = tf.extractfile(member).read()
    if current:
        yield current


class TarShardDataset(IterableDataset):
    def __init__(self, shards: List[str], cfg, rank: int, world: int, loop: bool = True,
                 max_samples: int = 0):
        self.shards = shards
        self.cfg = cfg
        self.rank = rank
        self.world = world
        self.loop = loop
        self.max_samples = max_samples

    def _my_shards(self, epoch: int) -> List[str]:
        mine = self.shards[self.rank :: self.world]
        info = get_worker_info()
        if info is not None:
            mine = mine[info.id :: info.num_workers]
        return mine

    def _decode(self, s: Dict[str, bytes]) -> dict:
        img = decode_image(s["npy"], self.cfg.data.decoder)
        caption = s["txt"].decode("utf-8")
        label = int(s["cls"]) if "cls" in s else -1
        return {"image": img, "caption": caption, "label": label}

    def __iter__(self):
        epoch, n = 0, 0
        while True:
            for shard in self._my_shards(epoch):
                for s in iter_tar_samples(shard):
                    yield self._decode(s)
                    n += 1
                    if self.max_samples and n >= self.max_samples:
                        return
            if not self.loop:
                return
            epoch += 1


class NpyCacheDataset(Dataset):
    """Pre-decoded images of this rank's data slice, memory-mapped: rank{r}.images.npy etc."""

    def __init__(self, cache_dir: str, rank: int):
        self.images = np.load(os.path.join(cache_dir, f"rank{rank}.images.npy"), mmap_mode="r")
        self.labels = np.load(os.path.join(cache_dir, f"rank{rank}.labels.npy"))
        with open(os.path.join(cache_dir, f"rank{rank}.captions.txt"), encoding="utf-8") as fh:
            self.captions = fh.read().split("\n")
        log.info("npy cache: %d samples, images %s %s", len(self.labels), self.images.shape, self.images.dtype)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return {"image": np.array(self.images[idx]), "caption": self.captions[idx],
                "label": int(self.labels[idx])}


class ResumableRandomSampler(Sampler):
    """Infinite shuffled index stream that can skip the samples already consumed."""

    def __init__(self, n: int, seed: int, start: int = 0):
        self.n, self.seed, self.start = n, seed, start

    def __iter__(self):
        epoch, pos = 0, 0
        while True:
            g = torch.Generator().manual_seed(self.seed + epoch)
            for i in torch.randperm(self.n, generator=g).tolist():
                if pos >= self.start:
                    yield i
                pos += 1
            epoch += 1

    def __len__(self):
        return self.n


class ClipCollate:
    def __init__(self, crop_size: int, context_length: int):
        self.crop = crop_size
        self.ctx = context_length

    def _center_crop(self, img: torch.Tensor) -> torch.Tensor:
        h, w = img.shape[-2:]
        top, left = (h - self.crop) // 2, (w - self.crop) // 2
        return img[:, top : top + self.crop, left : left + self.crop]

    def __call__(self, samples: List[dict]) -> dict:
        imgs = []
        for s in samples:
            t = torch.from_numpy(np.ascontiguousarray(s["image"])).permute(2, 0, 1).float().div_(255.0)
            imgs.append((self._center_crop(t) - MEAN) / STD)
        return {
            "images": torch.stack(imgs),
            "tokens": torch.stack([tokenize(s["caption"], self.ctx) for s in samples]),
            "labels": torch.tensor([s["label"] for s in samples], dtype=torch.long),
        }


def _seed_worker(worker_id: int) -> None:
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def build_train_loader(cfg, rank: int, world: int, start_sample: int = 0) -> DataLoader:
    collate = ClipCollate(cfg.data.crop_size, cfg.model.context_length)
    if cfg.data.format == "npy-cache":
        ds = NpyCacheDataset(cfg.data.cache_dir, rank)
        sampler = ResumableRandomSampler(len(ds), cfg.train.seed, start_sample)
        return DataLoader(ds, batch_size=cfg.data.batch_size, sampler=sampler, collate_fn=collate,
                          num_workers=cfg.data.num_workers, drop_last=True,
                          pin_memory=torch.cuda.is_available())
    shards = expand_braces(cfg.data.train_shards)
    ds = TarShardDataset(shards, cfg, rank, world)
    kw = dict(prefetch_factor=cfg.data.prefetch_factor, persistent_workers=True,
              worker_init_fn=_seed_worker) if cfg.data.num_workers > 0 else {}
    return DataLoader(ds, batch_size=cfg.data.batch_size, collate_fn=collate,
                      num_workers=cfg.data.num_workers, pin_memory=torch.cuda.is_available(), **kw)


def build_eval_loader(cfg) -> DataLoader:
    collate = ClipCollate(cfg.data.crop_size, cfg.model.context_length)
    ds = TarShardDataset(expand_braces(cfg.data.eval_shards), cfg, 0, 1, loop=False,
                         max_samples=cfg.data.max_eval_samples)
    return DataLoader(ds, batch_size=cfg.data.eval_batch_size, collate_fn=collate, num_workers=0)
