"""Indexed (.bin/.idx) GPT datasets, blending, Megatron-style samplers and loaders."""

import ctypes
import hashlib
import json
import mmap
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist

from . import parallel_state as ps
from .utils import print_rank_0

_INDEX_HEADER = b"MMIDIDX\x00\x00"
_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}


def write_indexed_dataset(prefix, documents, dtype=np.uint16):
    """documents: list of 1-D integer arrays."""
    sizes = np.array([len(d) for d in documents], dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(documents), dtype=np.int64)
    if len(documents) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64) * itemsize)
    with open(prefix + ".bin", "wb") as f:
        for d in documents:
            f.write(np.asarray(d, dtype=dtype).tobytes(order="C"))
    with open(prefix + ".idx", "wb") as f:
        f.write(_INDEX_HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", _DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(documents)))
        f.write(sizes.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))


class IndexedDataset:
    def __init__(self, path_prefix):
        self.path_prefix = path_prefix
        with open(path_prefix + ".idx", "rb") as f:
            header = f.read(9)
            assert header == _INDEX_HEADER, "bad header in {}.idx, cannot read".format(path_prefix)
            (version,) = struct.unpack("<Q", f.read(8))
            assert version == 1
            (code,) = struct.unpack("<B", f.read(1))
            self.dtype = _DTYPES[code]
            (self.num_docs,) = struct.unpack("<Q", f.read(8))
            offset = f.tell()
        buf = np.memmap(path_prefix + ".idx", mode="r", order="C")
        self.sizes = np.frombuffer(buf, dtype=np.int32, count=self.num_docs, offset=offset)
        self.pointers = np.frombuffer(buf, dtype=np.int64, count=self.num_docs,
                                      offset=offset + self.sizes.nbytes)
        self._itemsize = np.dtype(self.dtype).itemsize
        self._pid = None

    def _open_bin(self):
        # (re)opened lazily in every process: dataloader workers must not share the mapping
        self._bin_file = open(self.path_prefix + ".bin", "rb")
        try:
            self._bin_mmap = mmap.mmap(self._bin_file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty shard
            self._bin_mmap = None
        if self._bin_mmap is not None:
            self._bin_array = np.frombuffer(self._bin_mmap, dtype=np.uint8)
            self._bin_address = self._bin_array.ctypes.data
        else:
            self._bin_address = 0
        self._pid = os.getpid()

    def __len__(self):
        return self.num_docs

    def get(self, idx, offset=0, length=None):
        if self._pid != os.getpid():
            self._open_bin()
        if length is None:
            length = int(self.sizes[idx]) - offset
        # single memcpy out of the mapping, cheaper than building numpy views per read
        address = self._bin_address + int(self.pointers[idx]) + offset * self._itemsize
        raw = ctypes.string_at(address, length * self._itemsize)
        return np.frombuffer(raw, dtype=self.dtype)

    def __getstate__(self):
        state = dict(self.__dict__)
        for k in ("_bin_file", "_bin_mmap", "_bin_array", "_bin_address"):
            state.pop(k, None)
        state["_pid"] = None
        return state


# ------------------------------------------------------------------ index cache

class _IndexCache:
    """Per-directory cache of doc/sample/shuffle index arrays.

    Only one process per cache directory builds at a time; the others wait
    for the lock file to go away and then load what was written.
    """

    def __init__(self, cache_dir):
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)
        self.lock_path = os.path.join(cache_dir, "index_build.lock")

    def paths(self, key):
        return {n: os.path.join(self.cache_dir, "{}-{}.npy".format(key, n))
                for n in ("document_index", "sample_index", "shuffle_index")}

    def _complete(self, key):
        return all(os.path.isfile(p) for p in self.paths(key).values())

    def get_or_build(self, key, build_fn):
        paths = self.paths(key)
        waited = 0.0
        while not self._complete(key):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if waited % 10 == 0:
                    try:
                        with open(self.lock_path) as f:
                            holder = f.read().strip() or "?"
                    except OSError:
                        holder = "?"
                    print("    > waiting for {} (held by pid {}) ...".format(self.lock_path, holder),
                          flush=True)
                time.sleep(1.0)
                waited += 1.0
                continue
            try:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                if not self._complete(key):
                    t0 = time.time()
                    arrays = build_fn()
                    for name, arr in arrays.items():
                        np.save(paths[name], arr, allow_pickle=False)
                    print("    > elapsed time to build and save index mappings (seconds): "
                          "{:4f}".format(time.time() - t0), flush=True)
            finally:
                os.remove(self.lock_path)
        return {n: np.load(p, allow_pickle=False, mmap_mode="r") for n, p in paths.items()}


def _build_document_index(num_docs, num_epochs, rng):
    doc_idx = np.mgrid[0:num_epochs, 0:num_docs][1].reshape(-1).astype(np.int32)
    rng.shuffle(doc_idx)
    return doc_idx


def _build_sample_index(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch):
    num_samples = (num_epochs * tokens_per_epoch - 1) // seq_length
    sample_idx = np.zeros([num_samples + 1, 2], dtype=np.int32)
    sample_index = 0
    doc_idx_index = 0
    doc_offset = 0
    sample_idx[sample_index] = (doc_idx_index, doc_offset)
    sample_index += 1
    while sample_index <= num_samples:
        remaining = seq_length + 1
        while remaining != 0:
            doc_id = doc_idx[doc_idx_index]
            doc_length = sizes[doc_id] - doc_offset
            remaining -= doc_length
            if remaining <= 0:
                doc_offset += remaining + doc_length - 1
                remaining = 0
            else:
                doc_idx_index += 1
                doc_offset = 0
        sample_idx[sample_index] = (doc_idx_index, doc_offset)
        sample_index += 1
    return sample_idx


class GPTDataset(torch.utils.data.Dataset):
    def __init__(self, indexed, name, num_samples, seq_length, seed, cache):
        self.indexed = indexed
        self.name = name
        self.seq_length = seq_length
        sizes = indexed.sizes
        tokens_per_epoch = int(np.sum(sizes))
        num_epochs = max(1, int(np.ceil((num_samples * seq_length + 1) / tokens_per_epoch)))
        desc = {"class": "GPTDataset", "path_prefix": indexed.path_prefix, "name": name,
                "num_samples": num_samples, "seq_length": seq_length, "seed": seed,
                "num_docs": int(len(indexed))}
        key = hashlib.md5(json.dumps(desc, sort_keys=True).encode()).hexdigest()

        def build():
            print("    > building document/sample/shuffle index for {} ({} docs, {} epochs)".format(
                os.path.basename(indexed.path_prefix), len(indexed), num_epochs), flush=True)
            rng = np.random.RandomState(seed)
            doc_idx = _build_document_index(len(indexed), num_epochs, rng)
            sample_idx = _build_sample_index(sizes, doc_idx, seq_length, num_epochs,
                                             tokens_per_epoch)
            shuffle_idx = np.arange(sample_idx.shape[0] - 1, dtype=np.int64)
            rng.shuffle(shuffle_idx)
            return {"document_index": doc_idx, "sample_index": sample_idx,
                    "shuffle_index": shuffle_idx}

        arrays = cache.get_or_build(key, build)
        self.doc_idx = arrays["document_index"]
        self.sample_idx = arrays["sample_index"]
        self.shuffle_idx = arrays["shuffle_index"]
        print("    > loaded index mappings for {}: total number of samples: {}, "
              "total number of epochs: {}".format(os.path.basename(indexed.path_prefix),
                                                  self.shuffle_idx.shape[0], num_epochs),
              flush=True)

    def __len__(self):
        return self.shuffle_idx.shape[0]

    def __getitem__(self, idx):
        idx = int(self.shuffle_idx[idx])
        doc_index_f, offset_f = self.sample_idx[idx]
        doc_index_l, offset_l = self.sample_idx[idx + 1]
        if doc_index_f == doc_index_l:
            sample = self.indexed.get(int(self.doc_idx[doc_index_f]), offset=int(offset_f),
                                      length=int(offset_l - offset_f + 1))
        else:
            parts = [self.indexed.get(int(self.doc_idx[doc_index_f]), offset=int(offset_f))]
            for i in range(doc_index_f + 1, doc_index_l):
                parts.append(self.indexed.get(int(self.doc_idx[i])))
            parts.append(self.indexed.get(int(self.doc_idx[doc_index_l]),
                                          length=int(offset_l + 1)))
            sample = np.concatenate(parts)
        return {"text": torch.from_numpy(np.array(sample, dtype=np.int64))}


class BlendedDataset(torch.utils.data.Dataset):
    def __init__(self, datasets, weights, size):
        self.datasets = datasets
        weights = np.array(weights, dtype=np.float64)
        weights = weights / weights.sum()
        self.size = size
        self.dataset_index = np.zeros(size, dtype=np.int16)
        self.dataset_sample_index = np.zeros(size, dtype=np.int64)
        counts = np.zeros(len(datasets), dtype=np.int64)
        for i in range(size):
            errors = weights * (i + 1) - counts
            d = int(np.argmax(errors))
            self.dataset_index[i] = d
            self.dataset_sample_index[i] = counts[d]
            counts[d] += 1
        print_rank_0("> built blended dataset with {} samples: {}".format(
            size, ", ".join("{:.3f}".format(w) for w in weights)))

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        d = self.dataset_index[idx]
        return self.datasets[d][int(self.dataset_sample_index[idx]) % len(self.datasets[d])]


class MegatronPretrainingSampler:
    def __init__(self, total_samples, consumed_samples, micro_batch_size,
                 data_parallel_rank, data_parallel_size):
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.micro_batch_times_data_parallel_size = micro_batch_size * data_parallel_size
        assert self.consumed_samples < self.total_samples, \
            "no samples left to consume: {}, {}".format(self.consumed_samples, self.total_samples)

    def __len__(self):
        return self.total_samples

    def __iter__(self):
        batch = []
        for idx in range(self.consumed_samples, self.total_samples):
            batch.append(idx)
            if len(batch) == self.micro_batch_times_data_parallel_size:
                start = self.data_parallel_rank * self.micro_batch_size
                yield batch[start:start + self.micro_batch_size]
                batch = []


def _parse_data_path(data_path):
    if len(data_path) == 1:
        return [1.0], data_path
    assert len(data_path) % 2 == 0, "--data-path must be `weight prefix` pairs"
    weights = [float(w) for w in data_path[0::2]]
    prefixes = data_path[1::2]
    return weights, prefixes


def build_train_data_iterator(args, consumed_samples):
    """Datasets are built and read on the first rank of every tensor-parallel group."""
    train_samples = args.train_iters * args.global_batch_size
    print_rank_0("> building train, validation, and test datasets ...")
    print_rank_0(" > datasets target sizes (minimum size):")
    print_rank_0("    train:      {}".format(train_samples))
    print_rank_0("    validation: {}".format(0))
    print_rank_0("    test:       {}".format(0))
    if ps.get_tensor_model_parallel_rank() != 0:
        return None
    cache_dir = args.data_cache_path or os.path.join(
        os.path.dirname(os.path.abspath(_parse_data_path(args.data_path)[1][0])), "cache")
    cache = _IndexCache(cache_dir)
    weights, prefixes = _parse_data_path(args.data_path)
    print_rank_0("> building train, validation, and test datasets for GPT ...")
    datasets = []
    for w, prefix in zip(weights, prefixes):
        indexed = IndexedDataset(prefix)
        print_rank_0("    {}: {} documents".format(prefix, len(indexed)))
        n = int(np.ceil(train_samples * w / sum(weights) * 1.005)) + 1
        datasets.append(GPTDataset(indexed, "train", n, args.seq_length, args.seed, cache))
    if len(datasets) == 1:
        dataset = datasets[0]
    else:
        dataset = BlendedDataset(datasets, weights, train_samples)
    print_rank_0("> finished creating GPT datasets ...")
    sampler = MegatronPretrainingSampler(len(dataset), consumed_samples, args.micro_batch_size,
                                         ps.get_data_parallel_rank(),
                                         ps.get_data_parallel_world_size())
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler,
                                         num_workers=args.num_workers,
                                         pin_memory=torch.cuda.is_available(),
                                         persistent_workers=args.num_workers > 0)
    return iter(loader)


def get_batch(data_iterator, args, device):
    """Read on TP rank 0 and broadcast to the rest of the tensor-parallel group."""
    shape = (args.micro_batch_size, args.seq_length + 1)
    if ps.get_tensor_model_parallel_rank() == 0:
        data = next(data_iterator)
        tokens_ = data["text"].to(device, non_blocking=True)
        assert tuple(tokens_.shape) == shape, "unexpected batch shape {}".format(tuple(tokens_.shape))
    else:
        tokens_ = torch.empty(shape, dtype=torch.int64, device=device)
    if ps.get_tensor_model_parallel_world_size() > 1:
        dist.broadcast(tokens_, ps.get_tensor_model_parallel_src_rank(),
                       group=ps.get_tensor_model_parallel_group())
    tokens = tokens_[:, :-1].contiguous()
    labels = tokens_[:, 1:].contiguous()
    position_ids = torch.arange(args.seq_length, dtype=torch.long, device=device)
    position_ids = position_ids.unsqueeze(0).expand_as(tokens)
    return tokens, labels, position_ids
