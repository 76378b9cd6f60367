"""Interaction shards, negative sampling and context features.

A shard `part-XXXXX.npz` holds, per training example: `user`, `hist` (N x L, 0 = padding), `target`,
`seen_row` (row of the user in the CSR `seen_indptr`/`seen_items`: everything that user interacted with).
`part-XXXXX.device.txt` holds the client device string of each example (empty when not logged).
"""
import logging
import os
import zlib

import numpy as np
import torch

log = logging.getLogger(__name__)


def shard_path(root, split, idx):
    return os.path.join(root, split, f"part-{idx:05d}.npz")


def load_items(root):
    brands = []
    with open(os.path.join(root, "items.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            _, brand = line.rstrip("\n").split("\t")
            brands.append(brand or None)
    return brands


def load_devices(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return [ln.rstrip("\n") or None for ln in f]


class Hasher:
    """Feature hashing of strings into `buckets`; the native FNV kernel when built, else crc32."""

    def __init__(self, buckets, native=False):
        self.buckets = buckets
        self.native = None
        if native:
            from . import native as _native

            self.native = _native.load()

    def __call__(self, tokens):
        if self.native is not None:
            return self.native.hash_tokens(tokens, self.buckets)
        return np.array([zlib.crc32(t.encode()) % self.buckets if t else 0 for t in tokens], dtype=np.int64)


class NegativeSampler:
    """Uniform negatives that the user has never interacted with (rejection sampling)."""

    def __init__(self, n_items, k, seed):
        self.n_items, self.k = n_items, k
        self.rng = np.random.default_rng(seed)

    def __call__(self, seen_sets):
        b = len(seen_sets)
        neg = self.rng.integers(1, self.n_items, size=(b, self.k))
        bad = np.array([[c in s for c in row] for row, s in zip(neg, seen_sets)])
        while bad.any():
            neg[bad] = self.rng.integers(1, self.n_items, size=int(bad.sum()))
            bad = np.array([[c in s for c in row] for row, s in zip(neg, seen_sets)])
        return neg


class TrainShard:
    def __init__(self, root, idx, n_items, batch_size, num_negatives, hasher, seed):
        path = shard_path(root, "train", idx)
        z = np.load(path)
        self.hist, self.target = z["hist"], z["target"]
        self.seen_row, self.indptr, self.seen = z["seen_row"], z["seen_indptr"], z["seen_items"]
        self.devices = load_devices(path.replace(".npz", ".device.txt"))
        self.batch_size = batch_size
        self.sampler = NegativeSampler(n_items, num_negatives, seed)
        self.hasher = hasher
        self.rng = np.random.default_rng(seed)
        self._seen_cache = {}
        log.info("train shard %s: %d examples, hist len %d, %d users", path, len(self.target), self.hist.shape[1],
                 len(self.indptr) - 1)

    def __len__(self):
        return len(self.target) // self.batch_size

    def _seen(self, row):
        s = self._seen_cache.get(row)
        if s is None:
            s = set(self.seen[self.indptr[row]:self.indptr[row + 1]].tolist())
            self._seen_cache[row] = s
        return s

    def __iter__(self):
        order = self.rng.permutation(len(self.target))
        for i in range(len(self)):
            idx = np.sort(order[i * self.batch_size:(i + 1) * self.batch_size])
            negs = self.sampler([self._seen(r) for r in self.seen_row[idx]])
            batch = {
                "hist": torch.from_numpy(self.hist[idx]),
                "target": torch.from_numpy(self.target[idx]),
                "negs": torch.from_numpy(negs),
            }
            if self.devices is not None:
                batch["device"] = torch.from_numpy(self.hasher([self.devices[j] for j in idx]))
            yield batch


def load_eval(root, idx):
    z = np.load(shard_path(root, "eval", idx))
    return z["hist"], z["hist_len"], z["target"]
