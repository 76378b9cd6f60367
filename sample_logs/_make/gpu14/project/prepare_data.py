#!/usr/bin/env python
"""Write a synthetic pre-tokenized corpus in the layout lm.data expects.

Stands in for tokenizing a real dump (no network on the cluster): Zipf-like token ids,
log-normal document lengths, EOS between documents, one flat uint16 file per shard.

    python prepare_data.py --out data/tokens --train-shards 4 --train-tokens 4M
    python prepare_data.py --out data/tokens --shard-doc-len 1:90000 --val-tokens 2:50M
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def per_shard(items: list[str], conv) -> dict[int, object]:
    out = {}
    for item in items:
        k, _, v = item.partition(":")
        out[int(k)] = conv(v)
    return out


def make_shard(rng, n_tokens: int, vocab: int, eos: int, doc_len: float, special: float) -> np.ndarray:
    out = np.empty(n_tokens, dtype=np.uint16)
    log_v = np.float32(np.log(vocab - 1))
    chunk = 1 << 24
    for start in range(0, n_tokens, chunk):
        n = min(chunk, n_tokens - start)
        # log-uniform ids: a cheap stand-in for a Zipf-like unigram distribution
        u = rng.random(n, dtype=np.float32)
        out[start : start + n] = np.minimum(np.exp(u * log_v).astype(np.int64) - 1, vocab - 2)
    # document boundaries
    n_docs = int(n_tokens / doc_len * 1.5) + 8
    lens = np.maximum(16, rng.lognormal(np.log(doc_len), 0.5, size=n_docs)).astype(np.int64)
    bounds = np.cumsum(lens)
    bounds = bounds[bounds < n_tokens]
    out[bounds] = eos
    out[-1] = eos
    if special > 0:
        # newer tokenizer revision: role markers <|im_start|>, <|im_end|>, ... after vocab
        n = max(1, int(n_tokens * special))
        where = rng.choice(n_tokens - 1, size=n, replace=False)
        out[where] = vocab + rng.integers(0, 8, size=n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data/tokens")
    ap.add_argument("--vocab-size", type=int, default=50304)
    ap.add_argument("--train-shards", type=int, default=4)
    ap.add_argument("--train-tokens", type=parse_size, default=parse_size("4M"), help="tokens per train shard")
    ap.add_argument("--val-shards", type=int, default=4)
    ap.add_argument("--val-tokens-default", type=parse_size, default=parse_size("256K"))
    ap.add_argument("--val-tokens", action="append", default=[], help="SHARD:SIZE override for one val shard")
    ap.add_argument("--doc-len", type=float, default=600.0, help="median document length (tokens)")
    ap.add_argument("--shard-doc-len", action="append", default=[], help="SHARD:LEN override (train split)")
    ap.add_argument("--shard-tokens", action="append", default=[], help="SHARD:SIZE override (train split)")
    ap.add_argument("--tokenizer-rev", action="append", default=[],
                    help="SHARD:RATE shards encoded with the chat tokenizer revision (role markers)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    eos = args.vocab_size - 1
    doc_len = per_shard(args.shard_doc_len, float)
    shard_tokens = per_shard(args.shard_tokens, parse_size)
    val_tokens = per_shard(args.val_tokens, parse_size)
    rev = per_shard(args.tokenizer_rev, float)
    meta = {"vocab_size": args.vocab_size, "eos_id": eos, "dtype": "uint16", "train": [], "val": []}
    for split, n_shards in (("train", args.train_shards), ("val", args.val_shards)):
        for i in range(n_shards):
            rng = np.random.default_rng(args.seed * 1000 + i + (500 if split == "val" else 0))
            if split == "train":
                n = shard_tokens.get(i, args.train_tokens)
                arr = make_shard(rng, n, args.vocab_size, eos, doc_len.get(i, args.doc_len), rev.get(i, 0.0))
            else:
                n = val_tokens.get(i, args.val_tokens_default)
                arr = make_shard(rng, n, args.vocab_size, eos, args.doc_len, 0.0)
            name = f"{split}_{i:03d}.bin"
            arr.tofile(os.path.join(args.out, name))
            meta[split].append(name)
            print(f"wrote {os.path.join(args.out, name)} ({n:,} tokens)")
    with open(os.path.join(args.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
