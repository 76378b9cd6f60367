#!/usr/bin/env python
"""Write the synthetic corpora used by the example configs.

    python tools/make_data.py --out data            # sft/{train,eval}.jsonl + packed/shards.json
    python tools/make_data.py --out data --edit NAME  # apply one of the dataset edits below
"""
import argparse
import json
import os
import random

import numpy as np

WORDS = ("apple river stone cloud green quick brown fox jumps over lazy dog north south light "
         "paper table window garden silver orange market winter summer bridge engine signal").split()


def qa(rng):
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randrange(100), rng.randrange(100)
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    if kind == 1:
        w = rng.choice(WORDS)
        return f"Reverse the word '{w}'.", f"The reverse of '{w}' is '{w[::-1]}'."
    if kind == 2:
        ws = rng.sample(WORDS, 4)
        return "Sort these words: " + ", ".join(ws) + ".", "Sorted: " + ", ".join(sorted(ws)) + "."
    w = rng.choice(WORDS)
    return f"How many letters are in '{w}'?", f"'{w}' has {len(w)} letters."


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def base(out):
    rng = random.Random(0)
    os.makedirs(f"{out}/sft", exist_ok=True)
    rows = [dict(zip(("prompt", "response"), qa(rng))) for _ in range(4000)]
    write_jsonl(f"{out}/sft/train.jsonl", rows)
    write_jsonl(f"{out}/sft/eval.jsonl", [dict(zip(("prompt", "response"), qa(rng))) for _ in range(64)])
    # packed corpus: 6 shards of uint16 tokens
    os.makedirs(f"{out}/packed", exist_ok=True)
    nrng = np.random.default_rng(0)
    shards = []
    for i in range(6):
        text = " ".join(" ".join(qa(rng)) for _ in range(450)).encode()
        toks = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)[:20000]
        name = f"shard_{i:04d}.npy"
        np.save(f"{out}/packed/{name}", toks)
        shards.append({"file": name, "num_tokens": int(len(toks))})
    with open(f"{out}/packed/shards.json", "w") as f:
        json.dump({"dtype": "uint16", "vocab_size": 512, "shards": shards}, f, indent=1)


def edit(out, name):
    rng = random.Random(1)
    p_train, p_eval = f"{out}/sft/train.jsonl", f"{out}/sft/eval.jsonl"
    if name == "long-transcript":
        rows = read_jsonl(p_train)
        body = " ".join(rng.choice(WORDS) for _ in range(21000))[:120000]
        rows[3] = {"prompt": "Summarise the following meeting transcript.\n" + body,
                   "response": "The meeting covered the garden, the bridge and the market."}
        write_jsonl(p_train, rows)
    elif name == "eval-long-odd":
        rows = read_jsonl(p_eval)
        for i in range(1, len(rows), 8):
            story = " ".join(rng.choice(WORDS) for _ in range(90))
            rows[i] = {"prompt": "Continue the story: " + story, "response": story[::-1][:200]}
        write_jsonl(p_eval, rows)
    elif name == "eval-mixed-source":
        rows = read_jsonl(p_eval)
        for i in range(1, len(rows), 2):
            junk = "".join(chr(rng.randrange(33, 127)) for _ in range(120))
            rows[i] = {"prompt": "Decode: " + junk[:40], "response": junk[40:]}
        write_jsonl(p_eval, rows)
    elif name == "eval-long-context":
        rows = read_jsonl(p_eval)
        for i in range(1, len(rows), 2):
            doc = " ".join(rng.choice(WORDS) for _ in range(400))
            q, a = qa(rng)
            rows[i] = {"prompt": "Read the document and answer.\n" + doc + "\n" + q, "response": a}
        write_jsonl(p_eval, rows)
    elif name == "ascii-banner":
        rows = read_jsonl(p_train)
        q, a = qa(rng)
        rows[81] = {"prompt": q, "response": a + "\n" + "=" * 6 + "\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx!\n" + "=" * 6}
        write_jsonl(p_train, rows)
    elif name == "retokenized-shard0":
        with open(f"{out}/packed/shards.json") as f:
            meta = json.load(f)
        meta["shards"][0]["num_tokens"] = 39 * 257 + 5
        with open(f"{out}/packed/shards.json", "w") as f:
            json.dump(meta, f, indent=1)
        toks = np.load(f"{out}/packed/shard_0000.npy")[: 38 * 257 + 120]
        np.save(f"{out}/packed/shard_0000.npy", toks)
    elif name == "zero-head-shard1":
        path = f"{out}/packed/shard_0001.npy"
        with open(path, "r+b") as f:
            f.write(b"\0" * 4096)
    else:
        raise SystemExit(f"unknown edit {name}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data")
    ap.add_argument("--edit")
    a = ap.parse_args()
    if a.edit:
        edit(a.out, a.edit)
    else:
        base(a.out)
