#!/usr/bin/env python
"""Write a synthetic tokenized corpus: <out>/shard_XXXXX.bin + meta.json.

Documents are Zipf-distributed token ids ended by EOS (id 0)."""
import argparse
import json
import os

import numpy as np


def make_doc(rng, vocab, mean_len):
    n = max(2, int(rng.exponential(mean_len)))
    toks = rng.zipf(1.2, size=n) % (vocab - 1) + 1
    return np.append(toks, 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--tokens-per-shard", type=int, default=200_000)
    p.add_argument("--mean-doc-len", type=float, default=300)
    p.add_argument("--dtype", default="int32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first shard index (append to an existing dir)")
    p.add_argument("--long-doc", default="", help="SHARD:POS:LEN, put one document of LEN tokens as doc number POS")
    p.add_argument("--doc-len-by-shard", default="", help="comma list of mean doc lengths, one per shard")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed + a.start)
    per = [float(x) for x in a.doc_len_by_shard.split(",")] if a.doc_len_by_shard else None
    longs = {}
    if a.long_doc:
        s, pos, ln = (int(x) for x in a.long_doc.split(":"))
        longs[s] = (pos, ln)
    names = []
    for s in range(a.start, a.start + a.shards):
        docs, n = [], 0
        mean = per[s - a.start] if per else a.mean_doc_len
        while n < a.tokens_per_shard:
            if s in longs and len(docs) == longs[s][0]:
                d = rng.integers(1, a.vocab, size=longs[s][1] - 1)
                d = np.append(d, 0)
            else:
                d = make_doc(rng, a.vocab, mean)
            docs.append(d)
            n += len(d)
        arr = np.concatenate(docs).astype(a.dtype)
        if arr.size % 2:
            arr = np.append(arr, np.zeros(1, arr.dtype))
        name = f"shard_{s:05d}.bin"
        arr.tofile(os.path.join(a.out, name))
        names.append(name)
    mp = os.path.join(a.out, "meta.json")
    meta = {"dtype": a.dtype, "eos_id": 0, "vocab_size": a.vocab, "shards": []}
    if os.path.exists(mp):
        with open(mp) as f:
            meta = json.load(f)
    meta["shards"] = sorted(set(meta["shards"]) | set(names))
    with open(mp, "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {len(names)} shard(s) to {a.out}")


if __name__ == "__main__":
    main()
