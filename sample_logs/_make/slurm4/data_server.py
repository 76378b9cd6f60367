#!/usr/bin/env python
"""CPU-side data server: decodes log-mel shards (with speed perturbation) and serves
padded batches to the trainer ranks over multiprocessing.connection sockets.

    python data_server.py --config configs/kws_remote.yaml --port 41000
"""

import argparse
import logging
import os
import socket
import threading
import time
from multiprocessing.connection import Listener

import numpy as np

from kws.config import apply_overrides, load_config

log = logging.getLogger("dataserver")


def list_shards(root, split):
    import glob

    return sorted(glob.glob(os.path.join(root, split, "shard-*")))


class Store:
    def __init__(self, root, cache_items, speeds, crop, seed):
        xs, lens, ys = [], [], []
        for sd in list_shards(root, "train"):
            xs.append(np.load(os.path.join(sd, "x.npy"), mmap_mode="r"))
            lens.append(np.load(os.path.join(sd, "lens.npy")))
            ys.append(np.load(os.path.join(sd, "y.npy")))
        self.shards = xs
        self.lens = lens
        self.ys = ys
        self.index = [(s, i, int(off)) for s in range(len(xs))
                      for i, off in enumerate(np.concatenate([[0], np.cumsum(lens[s])[:-1]]))]
        self.cache, self.cache_items = {}, cache_items
        self.speeds, self.crop = speeds, crop
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def _decode(self, k):
        s, i, off = self.index[k]
        n = int(self.lens[s][i])
        raw = np.asarray(self.shards[s][off:off + n], dtype=np.float32)
        raw = (raw - raw.mean(0)) / (raw.std(0) + 1e-5)
        variants = []
        for sp in self.speeds:  # speed perturbation by resampling the time axis
            t_new = max(1, int(round(n / sp)))
            src = np.linspace(0, n - 1, t_new)
            lo = np.floor(src).astype(int)
            hi = np.minimum(lo + 1, n - 1)
            w = (src - lo)[:, None].astype(np.float32)
            variants.append((1 - w) * raw[lo] + w * raw[hi])
        return variants, int(self.ys[s][i])

    def get(self, k):
        with self.lock:
            hit = self.cache.get(k)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        item = self._decode(k)
        with self.lock:
            if len(self.cache) < self.cache_items:
                self.cache[k] = item
        return item

    def batch(self, bs):
        ks = self.rng.integers(0, len(self.index), size=bs)
        feats, labels = [], []
        for k in ks:
            variants, y = self.get(int(k))
            f = variants[self.rng.integers(0, len(variants))]
            if self.crop and f.shape[0] > self.crop:
                s = self.rng.integers(0, f.shape[0] - self.crop + 1)
                f = f[s:s + self.crop]
            feats.append(f)
            labels.append(y)
        lens = np.array([f.shape[0] for f in feats], dtype=np.int64)
        out = np.zeros((bs, lens.max(), feats[0].shape[1]), dtype=np.float32)
        for j, f in enumerate(feats):
            out[j, : f.shape[0]] = f
        return out, lens, np.array(labels, dtype=np.int64)


def serve_client(conn, store, stats):
    rank = None
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "hello":
                rank = msg[1]
                conn.send({"items": len(store.index), "speeds": store.speeds})
                log.info("rank %s connected", rank)
            elif msg[0] == "next":
                conn.send(store.batch(msg[2]))
                stats[rank] = stats.get(rank, 0) + 1
            elif msg[0] == "bye":
                log.info("rank %s done after %d batches", rank, stats.get(rank, 0))
                return
    except (EOFError, ConnectionResetError, BrokenPipeError):
        log.warning("rank %s disconnected", rank)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s [{socket.gethostname()}:dataserver] %(message)s")
    cfg = apply_overrides(load_config(a.config), a.overrides)
    srv = cfg.server
    store = Store(cfg.data.root, srv.cache_items, srv.speeds, cfg.data.crop_frames, cfg.seed)
    log.info("data server pid %d: %d utterances, speeds %s, cache up to %d items",
             os.getpid(), len(store.index), srv.speeds, srv.cache_items)
    listener = Listener(("0.0.0.0", a.port), authkey=cfg.data.authkey.encode(), backlog=64)
    log.info("listening on %s:%d", socket.gethostname(), a.port)
    stats = {}

    def report():
        while True:
            time.sleep(srv.report_every_s)
            log.info("served %s batches, cache %d items (hits %d, misses %d)",
                     sum(stats.values()), len(store.cache), store.hits, store.misses)

    threading.Thread(target=report, daemon=True).start()
    while True:
        conn = listener.accept()
        threading.Thread(target=serve_client, args=(conn, store, stats), daemon=True).start()


if __name__ == "__main__":
    main()
