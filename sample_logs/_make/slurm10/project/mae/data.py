"""Synthetic image shards (uint8 N x C x H x W .npy files) + manifest, node-local staging, per-rank loading."""
import argparse
import io
import json
import logging
import os
import shutil
import time

import numpy as np
import torch

log = logging.getLogger("mae.data")


def synth_images(n, img_size, chans, rng, chunk=1024):
    """Smooth random patterns: three oriented sinusoids plus a gaussian blob per channel."""
    yy, xx = np.meshgrid(np.linspace(0, 1, img_size), np.linspace(0, 1, img_size), indexing="ij")
    yy, xx = yy[None, None].astype(np.float32), xx[None, None].astype(np.float32)
    out = np.empty((n, chans, img_size, img_size), dtype=np.uint8)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        img = np.zeros((m, chans, img_size, img_size), dtype=np.float32)
        for _ in range(3):
            fx, fy = rng.uniform(0.5, 4.0, size=(2, m, chans, 1, 1)).astype(np.float32)
            ph = rng.uniform(0, 2 * np.pi, size=(m, chans, 1, 1)).astype(np.float32)
            img += np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
        cx, cy = rng.uniform(0.2, 0.8, size=(2, m, chans, 1, 1)).astype(np.float32)
        sd = rng.uniform(0.05, 0.2, size=(m, chans, 1, 1)).astype(np.float32)
        img += 2.0 * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * sd * sd))
        lo = img.min(axis=(1, 2, 3), keepdims=True)
        hi = img.max(axis=(1, 2, 3), keepdims=True)
        out[s:s + m] = ((img - lo) / (hi - lo + 1e-6) * 255).astype(np.uint8)
    return out


def prepare(root, shard_sizes, val_size, img_size, chans=3, seed=1234):
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(seed)
    shards = []
    for i, n in enumerate(shard_sizes):
        name = f"train-{i:05d}.npy"
        np.save(os.path.join(root, name), synth_images(n, img_size, chans, rng))
        shards.append({"file": name, "num_images": n})
    np.save(os.path.join(root, "val.npy"), synth_images(val_size, img_size, chans, rng))
    manifest = {"img_size": img_size, "chans": chans, "train": shards,
                "val": {"file": "val.npy", "num_images": val_size}}
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def read_manifest(cfg):
    with open(os.path.join(cfg["data"]["root"], cfg["data"]["manifest"])) as f:
        return json.load(f)


def load_array(path):
    if path.endswith(".zst"):
        import zstandard  # compressed shards from the archive tier
        with open(path, "rb") as f:
            raw = zstandard.ZstdDecompressor().decompress(f.read())
        return np.load(io.BytesIO(raw))
    return np.load(path)


def _acquire(lock_path, poll=0.5):
    while True:
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.close(fd)
            return
        except FileExistsError:
            log.debug("lock %s held by another process, retrying", lock_path)
            time.sleep(poll)


def stage_to_node_cache(cfg, manifest, local_rank):
    """Local rank 0 of every node copies the shards to node-local scratch; returns the dir to read from."""
    cache_dir = os.path.expandvars(cfg["data"]["cache_dir"])
    if local_rank == 0:
        os.makedirs(cache_dir, exist_ok=True)
        log.info("staging %d shards to node-local cache %s", len(manifest["train"]), cache_dir)
        lock = os.path.join(cache_dir, ".staging.lock")
        _acquire(lock)
        try:
            for sh in manifest["train"]:
                src = os.path.join(cfg["data"]["root"], sh["file"])
                dst = os.path.join(cache_dir, sh["file"])
                if not os.path.exists(dst):
                    shutil.copyfile(src, dst)
        finally:
            os.unlink(lock)
        log.info("node-local cache ready")
    return cache_dir


class ShardDataset(torch.utils.data.Dataset):
    def __init__(self, files, img_size):
        arrays = []
        for path in files:
            arr = load_array(path)
            log.info("loaded shard %s shape=%s", path, tuple(arr.shape))
            arrays.append(arr)
        self.images = np.concatenate(arrays, axis=0)
        assert self.images.shape[-1] == img_size, (self.images.shape, img_size)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return torch.from_numpy(self.images[i]).float().div_(255.0)


def rank_shards(manifest, rank, world):
    return manifest["train"][rank::world]


def main():
    ap = argparse.ArgumentParser(description="write synthetic image shards")
    ap.add_argument("--out", default="data")
    ap.add_argument("--shard-sizes", default="64,64,64,64")
    ap.add_argument("--val-size", type=int, default=64)
    ap.add_argument("--img-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    sizes = [int(s) for s in a.shard_sizes.split(",")]
    m = prepare(a.out, sizes, a.val_size, a.img_size, seed=a.seed)
    print(f"wrote {len(m['train'])} train shards ({sum(sizes)} images) + val ({a.val_size}) to {a.out}")


if __name__ == "__main__":
    main()
