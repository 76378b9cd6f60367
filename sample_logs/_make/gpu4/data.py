"""Data loading: indexed token shards (.bin/.idx), a background prefetcher,
the SFT collator, the tokenizer and the dataset cache."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import queue
import shutil
import struct
import threading
import time

import numpy as np
import torch

logger = logging.getLogger("trainer")

_INDEX_MAGIC = b"TIDX\x00\x00\x00\x00"
_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.int32}
TASKS = ["qa", "summ", "cls", "chat"]


# --------------------------------------------------------------------------- tokenizer
class Tokenizer:
    def __init__(self, vocab, added_tokens, name):
        self.vocab = vocab
        self.added_tokens = added_tokens
        self.name = name
        self.pad_token_id = vocab.get("<pad>", 0)

    def __len__(self):
        return len(self.vocab) + len(self.added_tokens)

    @classmethod
    def from_pretrained(cls, path):
        with open(os.path.join(path, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        added = []
        cfg_file = os.path.join(path, "tokenizer_config.json")
        if os.path.exists(cfg_file):
            with open(cfg_file, encoding="utf-8") as f:
                added = json.load(f).get("added_tokens", [])
        return cls(vocab, added, os.path.basename(os.path.normpath(path)))


def download_tokenizer(name, hub_dir, cache_dir):
    """Fetch a tokenizer from the (mirrored) hub into a local cache directory."""
    dest = os.path.join(cache_dir, name)
    if os.path.exists(os.path.join(dest, "vocab.json")):
        logger.info("Tokenizer %s found in cache %s", name, dest)
        return dest
    src = os.path.join(hub_dir, name)
    logger.info("Downloading tokenizer %s from %s to %s", name, src, dest)
    os.makedirs(cache_dir, exist_ok=True)
    shutil.copytree(src, dest, dirs_exist_ok=True)
    return dest


# --------------------------------------------------------------------------- shards
class IndexedShard:
    """A shard written by prepare_data.py: <prefix>.bin holds the tokens,
    <prefix>.idx holds sizes, pointers, prompt lengths and task ids."""

    def __init__(self, prefix):
        self.prefix = prefix
        with open(prefix + ".idx", "rb") as f:
            buf = f.read()
        if buf[:8] != _INDEX_MAGIC:
            raise ValueError(f"{prefix}.idx: index file doesn't match the expected format")
        (version,) = struct.unpack("<Q", buf[8:16])
        dtype_code = buf[16]
        (n,) = struct.unpack("<Q", buf[17:25])
        self.version = version
        self.dtype = _DTYPES[dtype_code]
        off = 25
        self.sizes = np.frombuffer(buf, dtype=np.int32, count=n, offset=off)
        off += self.sizes.nbytes
        self.pointers = np.frombuffer(buf, dtype=np.int64, count=n, offset=off)
        off += self.pointers.nbytes
        self.prompt_lens = np.frombuffer(buf, dtype=np.int32, count=n, offset=off)
        off += self.prompt_lens.nbytes
        self.tasks = np.frombuffer(buf, dtype=np.int8, count=n, offset=off)
        self.tokens = np.memmap(prefix + ".bin", dtype=self.dtype, mode="r")

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        start = self.pointers[i] // np.dtype(self.dtype).itemsize
        toks = np.asarray(self.tokens[start : start + self.sizes[i]], dtype=np.int64)
        return toks, int(self.prompt_lens[i]), int(self.tasks[i])


def shard_num_docs(prefix):
    with open(prefix + ".idx", "rb") as f:
        header = f.read(25)
    return struct.unpack("<Q", header[17:25])[0]


def list_shards(data_dir, split):
    return sorted(p[: -len(".idx")] for p in glob.glob(os.path.join(data_dir, split, "shard_*.idx")))


# --------------------------------------------------------------------------- collator
class SFTCollator:
    def __init__(self, max_seq_length, pad_token_id=0):
        self.max_seq_length = max_seq_length
        self.pad_token_id = pad_token_id

    def __call__(self, docs):
        docs = [(t[: self.max_seq_length + 1], p, task) for t, p, task in docs]
        length = max(len(t) for t, _, _ in docs) - 1
        bsz = len(docs)
        input_ids = torch.full((bsz, length), self.pad_token_id, dtype=torch.long)
        labels = torch.full((bsz, length), -100, dtype=torch.long)
        attention_mask = torch.zeros((bsz, length), dtype=torch.long)
        task_ids = torch.empty(bsz, dtype=torch.long)
        for i, (toks, prompt_len, task) in enumerate(docs):
            t = torch.from_numpy(toks)
            n = len(t) - 1
            input_ids[i, :n] = t[:-1]
            lab = t[1:].clone()
            lab[: max(prompt_len - 1, 0)] = -100
            labels[i, :n] = lab
            attention_mask[i, :n] = 1
            task_ids[i] = task
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask, "task_ids": task_ids}


# --------------------------------------------------------------------------- train stream
class PrefetchingShardStream:
    """Iterates over this rank's shards (round-robin split), forming batches
    of consecutive documents on a background thread."""

    _END = object()

    def __init__(self, shard_prefixes, batch_size, collator, prefetch=2, rank=0):
        self.shard_prefixes = shard_prefixes
        self.batch_size = batch_size
        self.collator = collator
        self.queue = queue.Queue(maxsize=max(prefetch, 1))
        self.epoch = 0
        self._thread = threading.Thread(target=self._worker, name=f"prefetch-rank{rank}", daemon=True)
        self._thread.start()

    def _batches(self):
        while True:
            for prefix in self.shard_prefixes:
                shard = IndexedShard(prefix)
                for start in range(0, len(shard) - self.batch_size + 1, self.batch_size):
                    yield self.collator([shard[i] for i in range(start, start + self.batch_size)])
            self.epoch += 1

    def _worker(self):
        for batch in self._batches():
            self.queue.put(batch)
        self.queue.put(self._END)

    def __iter__(self):
        return self

    def __next__(self):
        item = self.queue.get()
        if item is self._END:
            raise StopIteration
        return item


def shards_for_rank(prefixes, rank, world):
    mine = prefixes[rank::world]
    if not mine:
        raise ValueError(f"no shards left for data-parallel rank {rank} ({len(prefixes)} shards, {world} ranks)")
    return mine


def eval_batches(prefix, batch_size, collator, max_batches=0):
    shard = IndexedShard(prefix)
    n = 0
    for start in range(0, len(shard) - batch_size + 1, batch_size):
        yield collator([shard[i] for i in range(start, start + batch_size)])
        n += 1
        if max_batches and n >= max_batches:
            break


# --------------------------------------------------------------------------- dataset cache
def dataset_fingerprint(data_dir, max_seq_length, seed):
    key = json.dumps({"data": os.path.abspath(data_dir), "max_seq_length": max_seq_length, "seed": seed}, sort_keys=True)
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def build_or_wait_for_cache(cache_root, data_dir, max_seq_length, seed, is_main):
    """The main process tokenizes/validates the shards once and writes a
    marker; the other processes wait for the marker and reuse the cache."""
    fp = dataset_fingerprint(data_dir, max_seq_length, seed)
    cache_dir = os.path.join(cache_root, fp)
    marker = os.path.join(cache_dir, ".complete")
    if is_main:
        if not os.path.exists(marker):
            logger.info("Building dataset cache in %s", cache_dir)
            os.makedirs(cache_dir, exist_ok=True)
            stats = {}
            for split in ("train", "eval"):
                lens = [IndexedShard(p).sizes.copy() for p in list_shards(data_dir, split)]
                arr = np.concatenate(lens) if lens else np.zeros(0, dtype=np.int32)
                np.save(os.path.join(cache_dir, f"{split}_lengths.npy"), arr)
                stats[split] = int(arr.size)
            with open(marker, "w") as f:
                json.dump(stats, f)
            logger.info("Dataset cache ready: %s", stats)
        else:
            logger.info("Reusing dataset cache %s", cache_dir)
    else:
        if not os.path.exists(marker):
            logger.info("Waiting for the main process to build the dataset cache in %s", cache_dir)
        while not os.path.exists(marker):
            time.sleep(0.5)
    with open(marker) as f:
        return json.load(f)
