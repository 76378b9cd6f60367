"""Mock pre-training data: a synthetic document corpus, an on-disk token cache
(memory mapped), packed / per-document datasets and the collate function."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, SequentialSampler

import parallel as mpu

logger = logging.getLogger("lm.data")

EOD_TOKEN_ID = 0


# --------------------------------------------------------------------------
# synthetic corpus
# --------------------------------------------------------------------------
def _doc_lengths(rng, num_docs, args):
    lengths = rng.lognormal(np.log(args.mock_doc_len_median), args.mock_doc_len_sigma, size=num_docs)
    return np.clip(lengths.astype(np.int64), args.mock_doc_len_min, args.mock_doc_len_max)


def _doc_tokens(rng, lengths, vocab_size):
    """Documents are noisy arithmetic progressions over the vocabulary, which a
    small LM can learn quickly (loss goes down in the logs)."""
    total = int(lengths.sum())
    steps = rng.integers(1, 4, size=total, dtype=np.int64)
    noise = rng.random(total) < 0.05
    steps[noise] = rng.integers(1, vocab_size, size=int(noise.sum()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    base = rng.integers(1, vocab_size, size=len(lengths), dtype=np.int64)
    csum = np.cumsum(steps)
    doc_offset = np.repeat(csum[starts] - steps[starts], lengths)
    tokens = (np.repeat(base, lengths) + csum - doc_offset) % (vocab_size - 1) + 1
    tokens[np.cumsum(lengths) - 1] = EOD_TOKEN_ID
    return tokens.astype(np.int32)


def generate_corpus(args, num_docs, seed):
    rng = np.random.default_rng(seed)
    lengths = _doc_lengths(rng, num_docs, args)
    tokens = _doc_tokens(rng, lengths, args.vocab_size)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return tokens, offsets


# --------------------------------------------------------------------------
# token cache (shared by all ranks on a node)
# --------------------------------------------------------------------------
class TokenCache:
    VERSION = 2

    def __init__(self, prefix):
        self.prefix = prefix
        self.meta = json.load(open(prefix + ".json"))
        self.offsets = np.load(prefix + ".idx.npy")
        self.tokens = np.memmap(prefix + ".bin", dtype=np.int32, mode="r")
        self.num_docs = len(self.offsets) - 1

    @staticmethod
    def prefix_for(args):
        key = f"{args.data_seed}-{args.vocab_size}-{args.mock_doc_len_median}-{args.mock_doc_len_sigma}"
        digest = hashlib.md5(key.encode()).hexdigest()[:10]
        return os.path.join(args.data_cache_dir, f"mock_corpus_{digest}")

    @classmethod
    def open_if_exists(cls, args):
        prefix = cls.prefix_for(args)
        if os.path.exists(prefix + ".json") and os.path.exists(prefix + ".bin"):
            return cls(prefix)
        return None

    def compatible(self, args):
        m = self.meta
        return (m.get("version") == self.VERSION and m.get("num_docs") == args.mock_num_docs
                and m.get("seed") == args.data_seed and m.get("vocab_size") == args.vocab_size)

    def close(self):
        mm = getattr(self.tokens, "_mmap", None)
        self.tokens = None
        if mm is not None:
            try:
                mm.close()
            except Exception:  # exported buffers still alive
                pass

    @classmethod
    def build(cls, args):
        prefix = cls.prefix_for(args)
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        t0 = time.time()
        tokens, offsets = generate_corpus(args, args.mock_num_docs, args.data_seed)
        with open(prefix + ".bin", "wb") as f:
            f.write(tokens.tobytes())
        np.save(prefix + ".idx.npy", offsets)
        meta = {"version": cls.VERSION, "num_docs": int(args.mock_num_docs), "num_tokens": int(len(tokens)),
                "seed": args.data_seed, "vocab_size": args.vocab_size}
        with open(prefix + ".json", "w") as f:
            json.dump(meta, f)
        logger.info("built token cache %s: %d documents, %d tokens in %.2fs", prefix, args.mock_num_docs,
                    len(tokens), time.time() - t0)

    def document(self, i):
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]


class InMemoryCorpus:
    """Holds the documents of this rank in host memory."""

    def __init__(self, docs):
        self.docs = docs
        self.num_docs = len(docs)
        self.offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)

    def document(self, i):
        return self.docs[i]


def get_token_cache(args):
    """Local rank 0 prepares the cache for the node, the others wait."""
    cache = TokenCache.open_if_exists(args)
    if args.local_rank == 0:
        if cache is None or not cache.compatible(args):
            if cache is not None:
                logger.info("token cache %s is stale (built for %d documents); rebuilding", cache.prefix,
                            cache.meta.get("num_docs", -1))
                cache.close()
            TokenCache.build(args)
            cache = TokenCache(TokenCache.prefix_for(args))
    dist.barrier()
    if cache is None:
        cache = TokenCache(TokenCache.prefix_for(args))
    logger.info("using token cache %s (%d documents, %d tokens)", cache.prefix, cache.num_docs,
                int(cache.offsets[-1]))
    return cache


def preload_corpus(args):
    """Rank 0 loads the whole corpus into memory and scatters document shards."""
    world = dist.get_world_size()
    shards = None
    if dist.get_rank() == 0:
        t0 = time.time()
        rng = np.random.default_rng(args.data_seed)
        docs = []
        chunk = 50_000
        loaded_tokens = 0
        for start in range(0, args.mock_num_docs, chunk):
            n = min(chunk, args.mock_num_docs - start)
            lengths = _doc_lengths(rng, n, args)
            tokens = _doc_tokens(rng, lengths, args.vocab_size).astype(np.int64)
            docs.extend(np.split(tokens, np.cumsum(lengths)[:-1]))
            loaded_tokens += int(lengths.sum())
            if (start // chunk) % 4 == 0:
                logger.info("loading corpus: %d/%d documents, %.1fM tokens (%.1fs)", start + n,
                            args.mock_num_docs, loaded_tokens / 1e6, time.time() - t0)
        logger.info("corpus loaded: %d documents, %.1fM tokens", len(docs), loaded_tokens / 1e6)
        shards = [docs[r::world] for r in range(world)]
    out = [None]
    dist.scatter_object_list(out, shards, src=0)
    return InMemoryCorpus(out[0])


# --------------------------------------------------------------------------
# datasets
# --------------------------------------------------------------------------
class PackedDataset(Dataset):
    """Concatenates documents (with EOD) and cuts fixed-length samples."""

    def __init__(self, corpus, doc_ids, seq_length):
        self.corpus = corpus
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.seq_length = seq_length
        lens = corpus.offsets[self.doc_ids + 1] - corpus.offsets[self.doc_ids]
        self.cum = np.concatenate([[0], np.cumsum(lens)])
        self.num_samples = max(0, int((self.cum[-1] - 1) // seq_length))

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        start = idx * self.seq_length
        end = start + self.seq_length + 1
        out = []
        d = int(np.searchsorted(self.cum, start, side="right") - 1)
        pos = start
        while pos < end:
            doc = self.corpus.document(int(self.doc_ids[d]))
            lo = pos - self.cum[d]
            hi = min(len(doc), end - self.cum[d])
            out.append(np.asarray(doc[lo:hi]))
            pos = self.cum[d] + hi
            d += 1
        tokens = torch.from_numpy(np.concatenate(out).astype(np.int64))
        return {"tokens": tokens}


class DocumentDataset(Dataset):
    """One sample per document, truncated to max_seq_length (no packing)."""

    def __init__(self, corpus, doc_ids, max_seq_length):
        self.corpus = corpus
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.max_seq_length = max_seq_length

    def __len__(self):
        return len(self.doc_ids)

    def __getitem__(self, idx):
        doc = np.asarray(self.corpus.document(int(self.doc_ids[idx])))[: self.max_seq_length + 1]
        return {"tokens": torch.from_numpy(doc.astype(np.int64))}


class MockValidationDataset(Dataset):
    """Held-out samples generated on the fly from a separate seed."""

    def __init__(self, args, num_samples):
        self.args = args
        self.num_samples = num_samples
        self.seq_length = args.seq_length

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        rng = np.random.default_rng((self.args.data_seed + 7919) * 1_000_003 + idx)
        lengths = np.array([self.seq_length + 1], dtype=np.int64)
        tokens = _doc_tokens(rng, lengths, self.args.vocab_size).astype(np.int64)
        return {"tokens": torch.from_numpy(tokens)}


class Collator:
    def __init__(self, pad_token_id=None):
        self.pad_token_id = pad_token_id

    def __call__(self, batch):
        seqs = [b["tokens"] for b in batch]
        t = max(len(s) for s in seqs) - 1
        input_pad = self.pad_token_id if (self.pad_token_id is not None and self.pad_token_id >= 0) else EOD_TOKEN_ID
        label_pad = self.pad_token_id if self.pad_token_id is not None else -100
        input_ids = torch.full((len(seqs), t), input_pad, dtype=torch.long)
        labels = torch.full((len(seqs), t), label_pad, dtype=torch.long)
        attention_mask = torch.zeros((len(seqs), t), dtype=torch.long)
        for i, s in enumerate(seqs):
            n = len(s) - 1
            input_ids[i, :n] = s[:-1]
            labels[i, :n] = s[1:]
            attention_mask[i, :n] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


# --------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------
def build_train_valid_datasets(args):
    if args.data_impl == "preload":
        corpus = preload_corpus(args)
        local_docs = np.arange(corpus.num_docs)
        train_ds = PackedDataset(corpus, local_docs, args.seq_length)
        sampler_kind = "local"
    else:
        corpus = get_token_cache(args)
        all_docs = np.arange(corpus.num_docs)
        if not args.packing:
            train_ds = DocumentDataset(corpus, all_docs, args.max_seq_length or args.seq_length)
            sampler_kind = "doc"
        elif args.data_sharding == "document":
            dp_rank, dp_size = mpu.get_data_parallel_rank(), mpu.get_data_parallel_world_size()
            train_ds = PackedDataset(corpus, all_docs[dp_rank::dp_size], args.seq_length)
            sampler_kind = "local"
        else:
            train_ds = PackedDataset(corpus, all_docs, args.seq_length)
            sampler_kind = "distributed"
    valid_ds = MockValidationDataset(args, args.val_samples)
    return train_ds, valid_ds, sampler_kind


def build_data_loaders(args):
    train_ds, valid_ds, sampler_kind = build_train_valid_datasets(args)
    dp_rank, dp_size = mpu.get_data_parallel_rank(), mpu.get_data_parallel_world_size()
    g = torch.Generator()
    g.manual_seed(args.seed)
    if sampler_kind == "distributed":
        train_sampler = DistributedSampler(train_ds, num_replicas=dp_size, rank=dp_rank, shuffle=True,
                                           seed=args.seed, drop_last=True)
    elif sampler_kind == "doc":
        train_sampler = DistributedSampler(train_ds, num_replicas=dist.get_world_size(), rank=dist.get_rank(),
                                           shuffle=True, seed=args.seed, drop_last=True)
    else:
        train_sampler = RandomSampler(train_ds, generator=g)
    logger.info("train dataset: %d samples (%s sampling), %d on this rank", len(train_ds), sampler_kind,
                len(train_sampler))

    collate = Collator(args.pad_token_id)
    kw = dict(num_workers=args.num_workers, pin_memory=args.device_type == "cuda", collate_fn=collate)
    if args.num_workers > 0:
        kw.update(persistent_workers=True, prefetch_factor=2)
    train_loader = DataLoader(train_ds, batch_size=args.micro_batch_size, sampler=train_sampler, drop_last=True, **kw)

    if args.eval_main_process_only:
        valid_sampler = SequentialSampler(valid_ds)
    else:
        valid_sampler = DistributedSampler(valid_ds, num_replicas=dp_size, rank=dp_rank, shuffle=False)
    valid_loader = DataLoader(valid_ds, batch_size=args.eval_micro_batch_size or args.micro_batch_size,
                              sampler=valid_sampler, num_workers=0, collate_fn=collate)
    return train_loader, valid_loader, train_sampler
