"""Write a synthetic SFT corpus as indexed token shards.

    python prepare_data.py --out data [--spec spec.json]

Layout:
    data/tokenizer/{vocab.json,tokenizer_config.json}
    data/hub/<tokenizer name>/...   (mirror used by the hub download path)
    data/train/shard_00000.{bin,idx} ...
    data/eval/shard_00000.{bin,idx} ...

Documents follow a noisy affine recurrence so the loss actually goes down.
The spec (JSON) can change sizes and plant particular documents."""

import argparse
import json
import os
import struct

import numpy as np

MAGIC = b"TIDX\x00\x00\x00\x00"
TASKS = ["qa", "summ", "cls", "chat"]
DEFAULTS = {
    "seed": 0,
    "vocab_size": 512,
    "seq_len": 64,
    "train_shards": 4,
    "docs_per_shard": 80,
    "eval_shards": 2,
    "eval_docs_per_shard": 48,
    "tokenizer_name": "tiny-bpe-512",
    # planted documents: lists of [shard, first_doc, count_or_length]
    "long_docs": [],
    "short_docs": [],
    "eos_docs": [],
    "prompt_only_docs": [],
    "truncate_train_idx": [],  # [shard, keep_fraction]
}


def make_doc(rng, length, vocab):
    lo = 3
    span = vocab - lo
    toks = np.empty(length, dtype=np.int64)
    toks[0] = 1  # <s>
    cur = int(rng.integers(lo, vocab))
    for i in range(1, length):
        if rng.random() < 0.8:
            cur = (cur * 7 + 13) % span + lo
        else:
            cur = int(rng.integers(lo, vocab))
        toks[i] = cur
    return toks


def write_shard(prefix, docs, dtype=np.uint16):
    sizes = np.array([len(d[0]) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    itemsize = np.dtype(dtype).itemsize
    if len(docs) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * itemsize
    prompt_lens = np.array([d[1] for d in docs], dtype=np.int32)
    tasks = np.array([d[2] for d in docs], dtype=np.int8)
    with open(prefix + ".bin", "wb") as f:
        for toks, _, _ in docs:
            f.write(toks.astype(dtype).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(bytes([itemsize]))
        f.write(struct.pack("<Q", len(docs)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(prompt_lens.tobytes())
        f.write(tasks.tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--spec", default=None)
    args = ap.parse_args()
    spec = dict(DEFAULTS)
    if args.spec:
        with open(args.spec) as f:
            spec.update(json.load(f))
    rng = np.random.default_rng(spec["seed"])
    vocab = spec["vocab_size"]
    L = spec["seq_len"] + 1
    out = args.out

    # tokenizer: base vocabulary + three added special tokens
    tok_dir = os.path.join(out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    base = {"<pad>": 0, "<s>": 1, "<unk>": 2}
    for i in range(3, vocab):
        base[f"t{i}"] = i
    added = [
        {"id": vocab, "content": "<|endoftext|>", "special": True},
        {"id": vocab + 1, "content": "<|user|>", "special": True},
        {"id": vocab + 2, "content": "<|assistant|>", "special": True},
    ]
    with open(os.path.join(tok_dir, "vocab.json"), "w") as f:
        json.dump(base, f)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"model_type": "bpe", "eos_token": "<|endoftext|>", "pad_token": "<pad>", "added_tokens": added}, f)
    hub = os.path.join(out, "hub", spec["tokenizer_name"])
    os.makedirs(hub, exist_ok=True)
    for name in ("vocab.json", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, name)) as src, open(os.path.join(hub, name), "w") as dst:
            dst.write(src.read())

    eos_id = vocab  # <|endoftext|>

    # train shards
    os.makedirs(os.path.join(out, "train"), exist_ok=True)
    for s in range(spec["train_shards"]):
        docs = []
        for i in range(spec["docs_per_shard"]):
            toks = make_doc(rng, L, vocab)
            docs.append([toks, int(rng.integers(4, 16)), int(rng.integers(0, 3))])
        for shard, i, length in spec["long_docs"]:
            if shard == s:
                docs[i][0] = make_doc(rng, length, vocab)
        for shard, i, length in spec["short_docs"]:
            if shard == s:
                docs[i][0] = make_doc(rng, length, vocab)
                docs[i][1] = min(docs[i][1], length // 2)
        for shard, first, count in spec["eos_docs"]:
            if shard == s:
                for i in range(first, first + count):
                    docs[i][0][-1] = eos_id
                    docs[i][2] = TASKS.index("chat")
        for shard, first, count in spec["prompt_only_docs"]:
            if shard == s:
                for i in range(first, first + count):
                    docs[i][1] = len(docs[i][0])
        write_shard(os.path.join(out, "train", f"shard_{s:05d}"), [tuple(d) for d in docs])
    for shard, keep in spec["truncate_train_idx"]:
        path = os.path.join(out, "train", f"shard_{shard:05d}.idx")
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(int(size * keep))

    # eval shards: shard 0 holds qa/summ/cls, later shards only summ/cls
    os.makedirs(os.path.join(out, "eval"), exist_ok=True)
    for s in range(spec["eval_shards"]):
        docs = []
        for i in range(spec["eval_docs_per_shard"]):
            task = i % 3 if s % 2 == 0 else 1 + i % 2
            docs.append((make_doc(rng, L, vocab), int(rng.integers(4, 16)), task))
        write_shard(os.path.join(out, "eval", f"shard_{s:05d}"), docs)
    print(f"wrote {spec['train_shards']} train and {spec['eval_shards']} eval shards to {out}")


if __name__ == "__main__":
    main()
