"""Dictionaries, subword segmentation, sharded parallel text and batching."""
import functools
import logging
import os
import sys

import numpy as np
import torch

log = logging.getLogger("nmt.data")

PAD, EOS, UNK, BOS = 0, 1, 2, 3


class Dictionary:
    def __init__(self):
        self.symbols = ["<pad>", "</s>", "<unk>", "<s>"]
        self.index = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def load(cls, path):
        d = cls()
        with open(path, encoding="utf-8") as f:
            for line in f:
                sym = line.split()[0]
                if sym not in d.index:
                    d.index[sym] = len(d.symbols)
                    d.symbols.append(sym)
        for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=@@":
            piece = ch + "@@"
            if piece not in d.index:
                d.index[piece] = len(d.symbols)
                d.symbols.append(piece)
        return d

    def __len__(self):
        return len(self.symbols)

    def string(self, ids):
        return " ".join(self.symbols[i] for i in ids if i not in (PAD, EOS, BOS)).replace("@@ ", "")


class Segmenter:
    """Splits unknown words into known continuation pieces (longest-match, memoised)."""

    def __init__(self, dictionary, max_piece=8):
        self.d = dictionary
        self.max_piece = max_piece
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 1_000_000))

    def pieces(self, word):
        if word in self.d.index:
            return [word]

        @functools.lru_cache(maxsize=None)
        def best(i):
            if i == len(word):
                return ()
            for j in range(min(len(word), i + self.max_piece), i, -1):
                piece = word[i:j] + ("@@" if j < len(word) else "")
                if piece in self.d.index:
                    return (piece,) + best(j)
            return (word[i] + "@@",) + best(i + 1)

        return list(best(0))

    def encode(self, line):
        ids = []
        for w in line.split():
            for p in self.pieces(w):
                ids.append(self.d.index.get(p, UNK))
        ids.append(EOS)
        return ids


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


class ParallelShard:
    def __init__(self, data_dir, split, shard, src_dict, tgt_dict, src_lang="src", tgt_lang="tgt"):
        prefix = os.path.join(data_dir, f"{split}.{shard}")
        src_seg, tgt_seg = Segmenter(src_dict), Segmenter(tgt_dict)
        src = read_lines(f"{prefix}.{src_lang}")
        tgt = read_lines(f"{prefix}.{tgt_lang}")
        if len(src) != len(tgt):
            raise ValueError(f"{prefix}: {len(src)} source lines but {len(tgt)} target lines")
        self.src = [src_seg.encode(l) for l in src]
        self.tgt = [tgt_seg.encode(l) for l in tgt]
        self.name = prefix
        log.info("loaded %s: %d pairs, %d/%d tokens", prefix, len(self.src),
                 sum(map(len, self.src)), sum(map(len, self.tgt)))

    def __len__(self):
        return len(self.src)


def collate(pairs):
    bsz = len(pairs)
    slen = max(len(s) for s, _ in pairs)
    tlen = max(len(t) for _, t in pairs)
    src = torch.full((bsz, slen), PAD, dtype=torch.long)
    prev = torch.full((bsz, tlen), PAD, dtype=torch.long)
    tgt = torch.full((bsz, tlen), PAD, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        tgt[i, : len(t)] = torch.tensor(t)
        prev[i, 0] = BOS
        prev[i, 1: len(t)] = torch.tensor(t[:-1])
    return src, prev, tgt


def batches(shard, batch_size, seed, epoch, shuffle=True):
    order = np.arange(len(shard))
    if shuffle:
        np.random.default_rng(seed + epoch).shuffle(order)
    for i in range(0, len(order), batch_size):
        idx = order[i: i + batch_size]
        yield collate([(shard.src[j], shard.tgt[j]) for j in idx])
