#!/usr/bin/env python
"""Synthetic interaction logs in the shard layout of retrieval.data (the "preprocessing" step).

    python make_data.py --out DATA [--shards 0,1,2,3] [--max-len 32] [defect options]

Defect options (each touches one shard only):
  --new-items SHARD:MAXID      shard's recent events reference item ids up to MAXID (catalogue grew)
  --crawler SHARD              shard contains a crawler account that interacted with every item
  --eval-users SHARD:N         shard's eval split has N users (the cold-start dump)
  --short-eval SHARD           shard's eval users all have fewer than 3 interactions
  --devices [MISSING_SHARD]    write per-example device strings; MISSING_SHARD has unlogged ones
  --pretrained DIR[:GPU_PART]  export a pretrained item table in world-size parts; GPU_PART saved on cuda:0
"""
import argparse
import os

import numpy as np

WORLD = 4
N_ITEMS = 20000
TRAIN_PER_SHARD = 3200
USERS_PER_SHARD = 400
EVAL_PER_SHARD = 1000
CRAWLER_EXAMPLES = 4
DEVICES = ["android-14/pixel-8", "ios-17.4/iphone15,2", "web/chrome-124", "web/firefox-125", "android-13/sm-s911b",
           "ios-16.7/ipad13,1", "tv/tizen-7.0", "web/safari-17"]


def spec(s):
    a, _, b = s.partition(":")
    return int(a), int(b)


def make_train(rng, shard, max_len, max_item, crawler):
    users = np.arange(USERS_PER_SHARD) + shard * USERS_PER_SHARD
    indptr, seen = [0], []
    for u in range(USERS_PER_SHARD):
        s = rng.choice(np.arange(1, max_item), size=rng.integers(20, 60), replace=False)
        if crawler and u == 7:
            s = np.arange(1, N_ITEMS)
        seen.append(s)
        indptr.append(indptr[-1] + len(s))
    seen_row = rng.integers(0, USERS_PER_SHARD, size=TRAIN_PER_SHARD)
    if crawler:
        seen_row[seen_row == 7] = 8
        seen_row[rng.choice(TRAIN_PER_SHARD, size=CRAWLER_EXAMPLES, replace=False)] = 7
    hist = np.zeros((TRAIN_PER_SHARD, max_len), dtype=np.int64)
    target = np.empty(TRAIN_PER_SHARD, dtype=np.int64)
    for i, r in enumerate(seen_row):
        s = seen[r]
        n = int(rng.integers(3, min(len(s), max_len + 1)))
        pick = rng.choice(len(s), size=n + 1, replace=False)
        hist[i, max_len - n:] = s[pick[:n]]
        target[i] = s[pick[n]]
    return dict(user=users[seen_row], hist=hist, target=target, seen_row=seen_row,
                seen_indptr=np.array(indptr, dtype=np.int64), seen_items=np.concatenate(seen).astype(np.int64))


def make_eval(rng, n, max_len, short):
    lo, hi = (1, 3) if short else (3, max_len + 1)
    hist_len = rng.integers(lo, hi, size=n)
    filled = np.arange(max_len)[None, :] >= (max_len - hist_len)[:, None]
    hist = np.where(filled, rng.integers(1, N_ITEMS, size=(n, max_len)), 0).astype(np.int64)
    target = rng.integers(1, N_ITEMS, size=n)
    return dict(hist=hist, hist_len=hist_len, target=target)


def export_pretrained(out, gpu_part):
    import torch
    import torch.serialization as ser

    rng = np.random.default_rng(7)
    table = torch.from_numpy(rng.normal(0, 0.05, size=(N_ITEMS, 32)).astype(np.float32))
    rows = N_ITEMS // WORLD
    os.makedirs(out, exist_ok=True)
    for r in range(WORLD):
        obj = {"rows": (r * rows, (r + 1) * rows), "weight": table[r * rows:(r + 1) * rows].clone()}
        tag = ser.location_tag
        if r == gpu_part:  # this part was re-exported from a GPU job: storages are tagged cuda:0
            ser.location_tag = lambda s: "cuda:0"
        try:
            torch.save(obj, os.path.join(out, f"part{r}.pt"))
        finally:
            ser.location_tag = tag


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", default=",".join(map(str, range(WORLD))))
    ap.add_argument("--max-len", type=int, default=32)
    ap.add_argument("--new-items", type=spec)
    ap.add_argument("--crawler", type=int)
    ap.add_argument("--eval-users", type=spec)
    ap.add_argument("--short-eval", type=int)
    ap.add_argument("--devices", nargs="?", const=-1, type=int)
    ap.add_argument("--pretrained")
    args = ap.parse_args()
    for split in ("train", "eval"):
        os.makedirs(os.path.join(args.out, split), exist_ok=True)
    with open(os.path.join(args.out, "items.tsv"), "w") as f:
        f.write("item_id\tbrand\n")
        for i in range(N_ITEMS):
            f.write(f"{i}\tbrand{i % 97}\n")
    for shard in map(int, args.shards.split(",")):
        rng = np.random.default_rng(100 + shard)
        max_item = args.new_items[1] if args.new_items and args.new_items[0] == shard else N_ITEMS
        tr = make_train(rng, shard, args.max_len, max_item, args.crawler == shard)
        if max_item > N_ITEMS:  # the newest events are at the end of the log, hence in the later examples
            old = tr["target"] < N_ITEMS
            old[: TRAIN_PER_SHARD // 2] = True
            tr["target"][~old] = rng.integers(N_ITEMS, max_item, size=int((~old).sum()))
        np.savez(os.path.join(args.out, "train", f"part-{shard:05d}.npz"), **tr)
        if args.devices is not None:
            dev = [DEVICES[i] for i in rng.integers(0, len(DEVICES), size=TRAIN_PER_SHARD)]
            if shard == args.devices:
                for i in rng.choice(TRAIN_PER_SHARD, size=25, replace=False):
                    dev[i] = ""
            with open(os.path.join(args.out, "train", f"part-{shard:05d}.device.txt"), "w") as f:
                f.write("\n".join(dev) + "\n")
        n_eval = args.eval_users[1] if args.eval_users and args.eval_users[0] == shard else EVAL_PER_SHARD
        ev = make_eval(rng, n_eval, args.max_len, args.short_eval == shard)
        np.savez(os.path.join(args.out, "eval", f"part-{shard:05d}.npz"), **ev)
        print(f"shard {shard}: {len(tr['target'])} train examples (hist len {args.max_len}), {n_eval} eval users")
    if args.pretrained:
        d, _, gpu = args.pretrained.partition(":")
        export_pretrained(d, int(gpu) if gpu else -1)


if __name__ == "__main__":
    main()
