"""Sharded WAV manifests, log-mel features, bucketing sampler and collate."""
import glob
import json
import logging
import math
import os
import random
import wave

import numpy as np
import torch

log = logging.getLogger("tinyasr.data")


def read_wav(path):
    with wave.open(path, "rb") as w:
        n = w.getnframes()
        sr = w.getframerate()
        raw = w.readframes(n)
    return np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0, sr


def mel_filterbank(n_mels, n_fft, sr):
    n_freq = n_fft // 2 + 1
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    imel = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    pts = imel(np.linspace(mel(0), mel(sr / 2), n_mels + 2))
    bins = np.floor((n_fft + 1) * pts / sr).astype(int)
    fb = np.zeros((n_mels, n_freq), dtype=np.float32)
    for m in range(1, n_mels + 1):
        l, c, r = bins[m - 1], bins[m], bins[m + 1]
        for k in range(l, c):
            fb[m - 1, k] = (k - l) / max(c - l, 1)
        for k in range(c, r):
            fb[m - 1, k] = (r - k) / max(r - c, 1)
    return torch.from_numpy(fb)


class FeatureExtractor:
    def __init__(self, n_mels=80, sample_rate=16000, win_ms=25, hop_ms=10):
        self.n_mels = n_mels
        self.sr = sample_rate
        self.win = int(sample_rate * win_ms / 1000)
        self.hop = int(sample_rate * hop_ms / 1000)
        self.n_fft = 512
        self.fb = mel_filterbank(n_mels, self.n_fft, sample_rate)
        self.window = torch.hann_window(self.win)

    def __call__(self, wav):
        x = torch.from_numpy(wav)
        spec = torch.stft(x, self.n_fft, self.hop, self.win, self.window, return_complex=True)
        power = spec.abs() ** 2
        feats = torch.log(self.fb @ power + 1e-6).t().contiguous()  # (T, n_mels)
        return (feats - feats.mean(0)) / (feats.std(0) + 1e-5)


class ShardedManifest(torch.utils.data.Dataset):
    """Each rank reads shards[rank::world] of <root>/<split>/shard-*.jsonl."""

    def __init__(self, root, split, rank, world, tokenizer, feats, max_duration=None):
        self.root = root
        shards = sorted(glob.glob(os.path.join(root, split, "shard-*.jsonl")))
        if not shards:
            raise FileNotFoundError(os.path.join(root, split))
        self.shards = shards[rank::world]
        self.items = []
        for s in self.shards:
            with open(s) as f:
                for line in f:
                    if line.strip():
                        self.items.append(json.loads(line))
        self.tok = tokenizer
        self.feats = feats
        log.info("%s: %d shards, %d utterances, %.2f h", split, len(self.shards), len(self.items),
                 sum(it["duration"] for it in self.items) / 3600)

    def frames(self, i):
        return int(self.items[i]["duration"] * 100)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        it = self.items[i]
        wav, sr = read_wav(os.path.join(self.root, it["audio"]))
        return {"id": it["id"], "feats": self.feats(wav), "text": it["text"],
                "ys": torch.tensor(self.tok.encode(it["text"]), dtype=torch.long)}


class BucketBatchSampler(torch.utils.data.Sampler):
    """Sorts utterances by length and packs them into batches of at most max_frames."""

    def __init__(self, dataset, max_frames, shuffle=True, seed=0):
        self.ds = dataset
        self.max_frames = max_frames
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._batches = None

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._batches = None

    def _pack(self):
        order = sorted(range(len(self.ds)), key=self.ds.frames)
        lens = [self.ds.frames(i) for i in order]
        batches, i, n = [], 0, len(order)
        while i < n:
            batch, frames = [], 0
            while i < n and frames + lens[i] <= self.max_frames:
                batch.append(order[i])
                frames += lens[i]
                i += 1
            if batch:
                batches.append(batch)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(batches)
        return batches

    def __iter__(self):
        if self._batches is None:
            self._batches = self._pack()
        return iter(self._batches)

    def __len__(self):
        if self._batches is None:
            self._batches = self._pack()
        return len(self._batches)


def collate(samples):
    feats = torch.nn.utils.rnn.pad_sequence([s["feats"] for s in samples], batch_first=True)
    flen = torch.tensor([s["feats"].shape[0] for s in samples])
    ys = torch.nn.utils.rnn.pad_sequence([s["ys"] for s in samples], batch_first=True, padding_value=-1)
    ylen = torch.tensor([len(s["ys"]) for s in samples])
    return {"feats": feats, "feat_lens": flen, "ys": ys, "ys_lens": ylen,
            "texts": [s["text"] for s in samples], "ids": [s["id"] for s in samples]}
