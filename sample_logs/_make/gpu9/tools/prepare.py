"""Writes the synthetic prompt shards, the SFT initial policy and the reward model checkpoint."""
import argparse
import gzip
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tinyrl.config import ModelConfig  # noqa: E402
from tinyrl.modeling import RewardModel, build_policy  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=".")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--rows", type=int, default=48)
    p.add_argument("--prompt-len", type=int, default=20)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--rm-hidden", type=int, default=192)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    root = os.path.join(a.out, "data", "prompts")
    os.makedirs(root, exist_ok=True)
    shards = []
    uid = 0
    for s in range(a.shards):
        name = f"part-{s:05d}.jsonl.gz"
        with gzip.open(os.path.join(root, name), "wt", encoding="utf-8") as f:
            for _ in range(a.rows):
                prompt = rng.integers(3, a.vocab, a.prompt_len).tolist()
                rec = {"uid": uid, "task": "match", "prompt": prompt, "answer": prompt[-4:]}
                f.write(json.dumps(rec) + "\n")
                uid += 1
        shards.append({"file": name, "rows": a.rows})
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump({"shards": shards, "vocab_size": a.vocab}, f, indent=1)
    torch.manual_seed(a.seed)
    ck = os.path.join(a.out, "checkpoints")
    os.makedirs(os.path.join(ck, "sft"), exist_ok=True)
    os.makedirs(os.path.join(ck, "rm"), exist_ok=True)
    pol = build_policy(ModelConfig(vocab_size=a.vocab))
    torch.save({"model": pol.state_dict(), "step": 1200}, os.path.join(ck, "sft", "policy.pt"))
    rm = RewardModel(a.vocab, a.rm_hidden)
    torch.save(rm.state_dict(), os.path.join(ck, "rm", "reward.pt"))
    print(f"wrote {a.shards} shards x {a.rows} rows to {root}, sft policy and reward model to {ck}")


if __name__ == "__main__":
    main()
