"""Checkpoint save/load helpers."""

from __future__ import annotations

import hashlib
import logging
import os
import time

import torch

log = logging.getLogger("kws.ckpt")


class _HashingWriter:
    """File wrapper that computes a sha256 of everything written (for the manifest)."""

    def __init__(self, fh):
        self.fh, self.h, self.n = fh, hashlib.sha256(), 0

    def write(self, data):
        self.h.update(data)
        self.n += len(data)
        return self.fh.write(data)

    def flush(self):
        self.fh.flush()


def save(state, path, atomic=True):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    target = path + ".tmp" if atomic else path
    t0 = time.time()
    with open(target, "wb") as fh:
        w = _HashingWriter(fh)
        torch.save(state, w)
    if atomic:
        os.replace(target, path)
    with open(path + ".sha256", "w") as fh:
        fh.write(f"{w.h.hexdigest()}  {os.path.basename(path)}\n")
    log.info("saved %s (%.1f MB, %.2fs)", path, w.n / 2**20, time.time() - t0)


def load(path):
    return torch.load(path, map_location="cpu")


def wait_for_update(path, newer_than, poll_s=0.05, timeout_s=600):
    """Block until `path` exists with an mtime newer than `newer_than` (used by follower nodes)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            st = os.stat(path)
            if st.st_mtime > newer_than and st.st_size > 0:
                return st
        except FileNotFoundError:
            pass
        time.sleep(poll_s)
    raise TimeoutError(f"{path} was not updated within {timeout_s}s")
