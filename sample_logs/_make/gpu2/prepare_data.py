#!/usr/bin/env python3
"""Write synthetic tokenized JSONL shards for trainer.py (generator side, not part of the job).

Usage: prepare_data.py SPEC.json OUT_DIR

The text is a random first-order Markov chain over the vocabulary (so the LM has something to
learn).  SPEC holds the sizes and an optional list of "edits" that damage or alter particular
documents of particular shards; the spec file itself is never shown to the training job.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

BOS, EOS = 1, 2
FIRST_TOKEN = 3


def make_chain(vocab: int, rng: np.random.Generator, fanout: int = 6):
    n = vocab - FIRST_TOKEN
    succ = rng.integers(FIRST_TOKEN, vocab, size=(vocab, fanout))
    probs = rng.dirichlet(np.full(fanout, 0.5), size=vocab)
    cum = np.cumsum(probs, axis=1)
    return succ, cum, n


def gen_doc(length: int, chain, rng: np.random.Generator) -> list[int]:
    succ, cum, n = chain
    tok = int(rng.integers(FIRST_TOKEN, FIRST_TOKEN + n))
    out = [BOS, tok]
    u = rng.random(max(length - 3, 0))
    for x in u:
        j = int(np.searchsorted(cum[tok], x))
        tok = int(succ[tok, min(j, succ.shape[1] - 1)])
        out.append(tok)
    out.append(EOS)
    return out


def main() -> None:
    spec_path, out_dir = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    rng = np.random.default_rng(spec.get("seed", 0))
    vocab = spec.get("vocab_size", 512)
    chain = make_chain(vocab, rng)
    lo, hi = spec.get("min_len", 48), spec.get("max_len", 200)
    os.makedirs(out_dir, exist_ok=True)

    layout = {"train": (spec.get("train_shards", 2), spec.get("train_docs", 400)),
              "val": (spec.get("val_shards", 2), spec.get("val_docs", 32))}
    edits = spec.get("edits", [])
    for split, (n_shards, n_docs) in layout.items():
        for shard in range(n_shards):
            mine = [e for e in edits if e["split"] == split and e["shard"] == shard]
            count = n_docs + sum(e.get("count", 0) for e in mine if e["kind"] == "extra_docs")
            docs = [gen_doc(int(rng.integers(lo, hi + 1)), chain, rng) for _ in range(count)]
            for e in mine:
                if e["kind"] == "long_docs":
                    for i in range(e["start"], e["start"] + e["count"]):
                        docs[i] = gen_doc(e["length"], chain, rng)
                elif e["kind"] == "empty_docs":
                    for i in range(e["start"], e["start"] + e["count"]):
                        docs[i] = []
                elif e["kind"] == "oov_tokens":
                    for i in range(e["start"], e["start"] + e["count"]):
                        pos = rng.choice(np.arange(2, len(docs[i]) - 1), size=e.get("per_doc", 3), replace=False)
                        for p in pos:
                            docs[i][int(p)] = int(rng.integers(vocab, vocab + e.get("extra_vocab", 64)))
            lines = [json.dumps({"id": f"{split}-{shard:05d}-{i:06d}", "ids": d}, separators=(",", ":"))
                     for i, d in enumerate(docs)]
            for e in mine:
                if e["kind"] == "truncate_line":
                    ln = lines[e["index"]]
                    lines[e["index"]] = ln[: int(len(ln) * e.get("keep", 0.6))]
            name = f"{split}-{shard:05d}-of-{n_shards:05d}.jsonl"
            with open(os.path.join(out_dir, name), "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
