"""Datasets over local jsonl files ({"text": ...} per line)."""
import glob
import json
import logging

import torch
from torch.utils.data import Dataset, IterableDataset

logger = logging.getLogger(__name__)


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


class JsonlTextDataset(Dataset):
    """Map-style dataset: reads all files up front and tokenizes."""

    def __init__(self, files, tokenizer, max_seq_length=128):
        if isinstance(files, str):
            files = sorted(glob.glob(files)) or [files]
        self.examples = []
        for path in files:
            for row in read_jsonl(path):
                enc = tokenizer(
                    row["text"],
                    truncation=max_seq_length > 0,
                    max_length=max_seq_length if max_seq_length > 0 else None,
                )
                self.examples.append(enc["input_ids"])
        logger.info("loaded %d examples from %d file(s)", len(self.examples), len(files))

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return {"input_ids": self.examples[i]}


class ShardedJsonlStream(IterableDataset):
    """Iterable dataset: each process streams only its own files (files[rank::world])."""

    def __init__(self, pattern, tokenizer, rank, world_size, max_seq_length=128, epochs=1):
        self.files = sorted(glob.glob(pattern))[rank::world_size]
        if not self.files:
            raise FileNotFoundError(f"no training files for rank {rank} matching {pattern}")
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.epochs = epochs

    def __iter__(self):
        for _ in range(self.epochs):
            for path in self.files:
                with open(path) as f:
                    for line in f:
                        if not line.strip():
                            continue
                        row = json.loads(line)
                        enc = self.tokenizer(row["text"], truncation=True, max_length=self.max_seq_length)
                        yield {"input_ids": enc["input_ids"]}
