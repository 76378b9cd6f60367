"""Create a synthetic text corpus (jsonl) and a word-level tokenizer for it."""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
from textft.tok import train_tokenizer  # noqa: E402

SUBJ = ["the operator", "a technician", "the controller", "our team", "the scheduler", "each worker",
        "the pipeline", "a new node", "the cluster", "the service", "this job", "the agent"]
VERB = ["restarts", "inspects", "updates", "monitors", "drains", "allocates", "reports", "migrates",
        "validates", "archives", "compresses", "replicates", "evaluates", "launches"]
OBJ = ["the storage pool", "a batch of records", "the event queue", "every shard", "the metrics table",
       "the index files", "a snapshot", "the config map", "two replicas", "the build cache",
       "the audit log", "several volumes", "the ingest buffer", "a new release"]
TAIL = ["before noon", "after the upgrade", "during the night", "on every tuesday", "without warning",
        "in the west region", "for the third time", "as planned", "under heavy load", "once per hour"]


def sentence(rng):
    s = f"{rng.choice(SUBJ)} {rng.choice(VERB)} {rng.choice(OBJ)} {rng.choice(TAIL)} ."
    if rng.random() < 0.4:
        s += f" then {rng.choice(SUBJ)} {rng.choice(VERB)} {rng.choice(OBJ)} ."
    return s


def doc(rng, n_sent):
    return " ".join(sentence(rng) for _ in range(n_sent))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="data")
    p.add_argument("--tokenizer_out", default="tokenizer")
    p.add_argument("--train_docs", type=int, default=1600)
    p.add_argument("--valid_docs", type=int, default=64)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(os.path.join(a.out, "shards"), exist_ok=True)
    train = [doc(rng, rng.randint(1, 5)) for _ in range(a.train_docs)]
    valid = [doc(rng, rng.randint(1, 5)) for _ in range(a.valid_docs)]
    with open(os.path.join(a.out, "train.jsonl"), "w") as f:
        for i, t in enumerate(train):
            f.write(json.dumps({"id": f"t{i:06d}", "text": t}) + "\n")
    with open(os.path.join(a.out, "valid.jsonl"), "w") as f:
        for i, t in enumerate(valid):
            f.write(json.dumps({"id": f"v{i:06d}", "text": t}) + "\n")
    per = len(train) // a.shards
    for s in range(a.shards):
        with open(os.path.join(a.out, "shards", f"part-{s:05d}.jsonl"), "w") as f:
            for i, t in enumerate(train[s * per:(s + 1) * per]):
                f.write(json.dumps({"id": f"t{s * per + i:06d}", "text": t}) + "\n")
    train_tokenizer(train + valid, a.tokenizer_out)
    print(f"wrote {len(train)} train / {len(valid)} valid docs, {a.shards} shards, tokenizer -> {a.tokenizer_out}")


if __name__ == "__main__":
    main()
