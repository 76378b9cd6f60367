"""Synthetic parallel corpus: a word-for-word cipher with reordering, sharded by rank.

    python make_data.py OUTDIR [--shards 4] [--tgt-vocab N] [--defect KIND:SHARD ...]
"""
import argparse
import base64
import os
import random


def word(rng, n):
    cons, vow = "bdfgklmnprstvz", "aeiou"
    return "".join(rng.choice(cons) + rng.choice(vow) for _ in range(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--src-vocab", type=int, default=800)
    ap.add_argument("--tgt-vocab", type=int, default=800)
    ap.add_argument("--train", type=int, default=400)
    ap.add_argument("--valid", type=int, default=40)
    ap.add_argument("--min-len", type=int, default=6)
    ap.add_argument("--max-len", type=int, default=24)
    ap.add_argument("--defect", action="append", default=[])
    a = ap.parse_args()
    rng = random.Random(7)
    os.makedirs(a.out, exist_ok=True)
    src_words = sorted({word(rng, rng.randint(1, 4)) for _ in range(a.src_vocab * 3)})[: a.src_vocab]
    tgt_words = sorted({word(rng, rng.randint(1, 4)).upper().lower() + "n" for _ in range(a.tgt_vocab * 3)})
    while len(tgt_words) < a.tgt_vocab:
        tgt_words.append(word(rng, 5) + str(len(tgt_words)))
    tgt_words = tgt_words[: a.tgt_vocab]
    mapping = {s: tgt_words[i % len(tgt_words)] for i, s in enumerate(src_words)}
    with open(os.path.join(a.out, "dict.src.txt"), "w") as f:
        f.writelines(f"{w} {rng.randint(5, 900)}\n" for w in src_words)
    with open(os.path.join(a.out, "dict.tgt.txt"), "w") as f:
        f.writelines(f"{w} {rng.randint(5, 900)}\n" for w in tgt_words)
    defects = {}
    for d in a.defect:
        kind, _, shard = d.partition(":")
        defects.setdefault(int(shard), []).append(kind)

    def pair(lo, hi):
        s = [rng.choice(src_words) for _ in range(rng.randint(lo, hi))]
        t = [mapping[w] for w in s]
        t = t[1::2] + t[0::2]
        return " ".join(s), " ".join(t)

    for shard in range(a.shards):
        kinds = defects.get(shard, [])
        for split, n in (("train", a.train), ("valid", a.valid)):
            pairs = [pair(a.min_len, a.max_len) for _ in range(n)]
            if split == "train" and "longdoc" in kinds:
                # a few documents that were never sentence-split
                for k in range(5):
                    s, t = zip(*[pair(a.min_len, a.max_len) for _ in range(14)])
                    pairs[rng.randrange(n)] = (" ".join(s), " ".join(t))
            if split == "train" and "blob" in kinds:
                blob = base64.b64encode(rng.randbytes(150_000)).decode()
                pairs[rng.randrange(n)] = (pairs[0][0] + " " + blob, pairs[0][1])
            if split == "valid" and "empty" in kinds:
                pairs = []
            if split == "valid" and "short" in kinds:
                pairs = [pair(1, 3) for _ in range(n)]
            prefix = os.path.join(a.out, f"{split}.{shard}")
            src_bytes = "".join(s + "\n" for s, _ in pairs).encode()
            if split == "train" and "latin1" in kinds:
                lines = src_bytes.split(b"\n")
                i = len(lines) // 3
                lines[i] = lines[i] + " caf\u00e9".encode("latin-1")
                src_bytes = b"\n".join(lines)
            with open(prefix + ".src", "wb") as f:
                f.write(src_bytes)
            with open(prefix + ".tgt", "w") as f:
                f.writelines(t + "\n" for _, t in pairs)


if __name__ == "__main__":
    main()
