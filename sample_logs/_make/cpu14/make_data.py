"""Write synthetic token shards: <out>/shard_XXXXX.jsonl with {"tokens": [...]} per line."""
import argparse, json, os, random
p = argparse.ArgumentParser()
p.add_argument("--out", required=True); p.add_argument("--num-shards", type=int, default=4)
p.add_argument("--docs", type=int, default=64); p.add_argument("--vocab", type=int, default=512)
p.add_argument("--min-len", type=int, default=40); p.add_argument("--max-len", type=int, default=120)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
r = random.Random(a.seed)
for s in range(a.num_shards):
    with open(os.path.join(a.out, f"shard_{s:05d}.jsonl"), "w") as f:
        for _ in range(a.docs):
            n = r.randint(a.min_len, a.max_len)
            f.write(json.dumps({"tokens": [r.randrange(1, a.vocab) for _ in range(n)]}) + "\n")
