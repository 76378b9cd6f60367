#!/usr/bin/env python
"""Writes a synthetic speech corpus: 16 kHz int16 WAVs + sharded JSONL manifests."""
import argparse
import json
import os
import random
import wave

import numpy as np

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which one you "
         "were her all she there would their we him been has when who will more no if out so said what up its about "
         "into than them can only other new some could time these two may then do first any my now such like our over "
         "man me even most made after also did many before must through back years where much your way well down").split()


def write_wav(path, seconds, rng, sr=16000):
    n = int(seconds * sr)
    t = np.arange(n) / sr
    f0 = rng.uniform(90, 250)
    sig = 0.3 * np.sin(2 * np.pi * f0 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.05 * rng.standard_normal(n)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((np.clip(sig, -1, 1) * 32767).astype(np.int16).tobytes())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="data")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--per-shard", type=int, default=24)
    p.add_argument("--dev-per-shard", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--extra", default="", help="JSON list of {split, shard, kind, ...} additions")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    prng = random.Random(a.seed)
    extras = json.loads(a.extra) if a.extra else []
    for split, per in (("train", a.per_shard), ("dev", a.dev_per_shard)):
        os.makedirs(os.path.join(a.out, split), exist_ok=True)
        os.makedirs(os.path.join(a.out, "wav", split), exist_ok=True)
        for s in range(a.shards):
            rows = []
            for u in range(per):
                uid = f"{split[0]}{s:02d}{u:04d}"
                dur = round(float(rng.uniform(1.5, 6.0)), 2)
                rel = f"wav/{split}/{uid}.wav"
                write_wav(os.path.join(a.out, rel), dur, rng)
                text = " ".join(prng.choice(WORDS) for _ in range(max(1, int(dur * 2.2))))
                rows.append({"id": uid, "audio": rel, "duration": dur, "text": text})
            for j, ex in enumerate(e for e in extras if e["split"] == split and e["shard"] == s):
                uid = f"{split[0]}{s:02d}{9000 + j:04d}"
                rel = f"wav/{split}/{uid}.wav"
                dur = float(ex.get("duration", 3.0))
                kind = ex["kind"]
                if kind == "html":
                    with open(os.path.join(a.out, rel), "w") as f:
                        f.write("<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head><body>Access denied</body></html>\n")
                else:
                    write_wav(os.path.join(a.out, rel), dur, rng)
                text = ex.get("text", " ".join(prng.choice(WORDS) for _ in range(max(1, int(dur * 2.2)))))
                rows.insert(int(ex.get("pos", len(rows) // 2)), {"id": uid, "audio": rel, "duration": dur, "text": text})
            with open(os.path.join(a.out, split, f"shard-{s:03d}.jsonl"), "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
    print(f"wrote {a.shards} shards to {a.out}")


if __name__ == "__main__":
    main()
