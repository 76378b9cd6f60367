"""Tiny decoder-only LM pretraining in the style of torchtitan (CPU / gloo).

FSDP2 (fully_shard) over a DeviceMesh (dp_replicate x dp_shard), activation
checkpointing, torch.distributed.checkpoint (DCP) save/resume including a
stateful dataloader, JSON config with --section.key=value CLI overrides.
"""
import argparse
import importlib
import json
import logging
import math
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from torch.distributed.elastic.multiprocessing.errors import record

logger = logging.getLogger("train")


def _patch_object_collectives_without_numpy():
    # The CPU image ships torch only; *_object collectives (used by DCP) call
    # tensor.numpy(). Decode the byte tensor without numpy instead.
    try:
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    import io
    from torch.distributed import distributed_c10d as c10d

    def _tensor_to_object(tensor, tensor_size, group):
        buf = bytes(tensor.cpu().tolist())[:tensor_size]
        return c10d._unpickler(io.BytesIO(buf)).load()
    c10d._tensor_to_object = _tensor_to_object


_patch_object_collectives_without_numpy()

DEFAULTS = {
    "job": {"dump_folder": "./outputs", "description": "tiny llama cpu"},
    "model": {"vocab_size": 512, "dim": 64, "n_layers": 2, "n_heads": 4,
              "max_seq_len": 128, "norm_type": "rmsnorm"},
    "parallel": {"dp_replicate": 1, "dp_shard": -1},
    "training": {"dataset_path": "./data", "batch_size": 4, "seq_len": 64, "steps": 20,
                 "lr": 3e-4, "warmup_steps": 5, "seed": 42, "activation_checkpoint": True,
                 "timeout_s": 30},
    "checkpoint": {"enable": True, "folder": "checkpoint", "interval": 10,
                   "load_step": -1},
    "metrics": {"log_freq": 2, "jsonl": ""},
}


def load_config(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    args, rest = p.parse_known_args(argv)
    cfg = json.loads(json.dumps(DEFAULTS))
    with open(args.config) as f:
        user = json.load(f)
    for sec, kv in user.items():
        cfg.setdefault(sec, {}).update(kv)
    i = 0
    while i < len(rest):
        a = rest[i]
        if not a.startswith("--"):
            raise SystemExit(f"unexpected argument {a}")
        if "=" in a:
            k, v = a[2:].split("=", 1); i += 1
        else:
            k, v = a[2:], rest[i + 1]; i += 2
        sec, key = k.split(".", 1)
        old = cfg[sec].get(key)
        if isinstance(old, bool):
            v = v.lower() in ("1", "true", "yes")
        elif isinstance(old, int):
            v = int(v)
        elif isinstance(old, float):
            v = float(v)
        cfg[sec][key] = v
    return cfg


# ---------------------------------------------------------------- model
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim)); self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def build_norm(kind, dim):
    if kind == "rmsnorm":
        return RMSNorm(dim)
    if kind == "layernorm":
        return nn.LayerNorm(dim)
    if kind == "fused_rmsnorm":
        mod = importlib.import_module("apex.normalization")
        return mod.FusedRMSNorm(dim)
    raise ValueError(f"unknown norm_type {kind}")


class Attention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads; self.head_dim = dim // n_heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = build_norm(cfg["norm_type"], cfg["dim"])
        self.attn = Attention(cfg["dim"], cfg["n_heads"])
        self.ffn_norm = build_norm(cfg["norm_type"], cfg["dim"])
        self.ffn = nn.Sequential(nn.Linear(cfg["dim"], 4 * cfg["dim"], bias=False), nn.SiLU(),
                                 nn.Linear(4 * cfg["dim"], cfg["dim"], bias=False))

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.pos_embeddings = nn.Parameter(torch.zeros(1, cfg["max_seq_len"], cfg["dim"]))
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg["n_layers"])})
        self.norm = build_norm(cfg["norm_type"], cfg["dim"])
        self.output = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        h = h + self.pos_embeddings[:, :min(T, self.pos_embeddings.shape[1])]
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


# ---------------------------------------------------------------- data
class JsonlTokenDataset:
    """Reads shard_*.jsonl files ({"tokens": [...]}) assigned round-robin to dp ranks."""

    def __init__(self, path, dp_rank, dp_world, seq_len):
        files = sorted(f for f in os.listdir(path) if f.endswith(".jsonl"))
        if not files:
            raise FileNotFoundError(f"no .jsonl shards found in {path}")
        self.files = [os.path.join(path, f) for f in files[dp_rank::dp_world]]
        self.seq_len = seq_len
        self.docs = []
        for fn in self.files:
            logger.info("loading shard %s", fn)
            with open(fn) as f:
                for lineno, line in enumerate(f, 1):
                    self.docs.append(json.loads(line)["tokens"])
        logger.info("loaded %d documents from %d shards", len(self.docs), len(self.files))


def pad_collate(docs, seq_len, pad_id=0):
    """Pad every document to the longest in the batch (docs already cut to seq_len+1)."""
    longest = max(len(d) for d in docs)
    out = torch.full((len(docs), longest), pad_id, dtype=torch.long)
    for i, d in enumerate(docs):
        out[i, :len(d)] = torch.tensor(d, dtype=torch.long)
    return out[:, :-1], out[:, 1:]


class StatefulLoader(Stateful):
    def __init__(self, ds, batch_size, seq_len):
        self.ds, self.bs, self.seq_len = ds, batch_size, seq_len
        self.pos = 0

    def __iter__(self):
        while True:
            docs = []
            for _ in range(self.bs):
                d = self.ds.docs[self.pos % len(self.ds.docs)]
                self.pos += 1
                docs.append(d[: self.seq_len + 1] if len(d) <= 4 * self.seq_len else d)
            yield pad_collate(docs, self.seq_len)

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, sd):
        self.pos = int(sd["pos"])


class AppState(Stateful):
    def __init__(self, model, optim):
        self.model, self.optim = model, optim

    def state_dict(self):
        msd, osd = get_state_dict(self.model, self.optim)
        return {"model": msd, "optim": osd}

    def load_state_dict(self, sd):
        set_state_dict(self.model, self.optim, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])


# ---------------------------------------------------------------- main
@record
def main():
    rank = int(os.environ.get("RANK", 0))
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_config(sys.argv[1:])
    tc = cfg["training"]
    dist.init_process_group("gloo", timeout=timedelta(seconds=tc["timeout_s"]))
    world = dist.get_world_size()
    logger.info("world_size=%d job=%s", world, cfg["job"]["description"])
    torch.manual_seed(tc["seed"])

    pc = cfg["parallel"]
    dp_shard = pc["dp_shard"] if pc["dp_shard"] > 0 else world // pc["dp_replicate"]
    mesh = init_device_mesh("cpu", (pc["dp_replicate"], dp_shard),
                            mesh_dim_names=("dp_replicate", "dp_shard"))
    logger.info("device mesh %s", mesh)
    dp_rank, dp_world = dist.get_rank(), world

    model = Transformer(cfg["model"])
    for name, blk in list(model.layers.items()):
        if tc["activation_checkpoint"]:
            blk = checkpoint_wrapper(blk)
            model.layers[name] = blk
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    nparams = sum(p.numel() for p in model.parameters())
    logger.info("model built: %d layers, %d params (sharded local view)", cfg["model"]["n_layers"], nparams)

    optim = torch.optim.AdamW(model.parameters(), lr=tc["lr"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / tc["warmup_steps"]))

    ds = JsonlTokenDataset(tc["dataset_path"], dp_rank, dp_world, tc["seq_len"])
    loader = StatefulLoader(ds, tc["batch_size"], tc["seq_len"])

    ck = cfg["checkpoint"]
    ckdir = os.path.join(cfg["job"]["dump_folder"], ck["folder"])
    app = AppState(model, optim)
    start = 0
    if ck["enable"] and os.path.isdir(ckdir):
        steps = sorted(int(d.split("-")[1]) for d in os.listdir(ckdir) if d.startswith("step-"))
        if steps:
            step = steps[-1] if ck["load_step"] < 0 else ck["load_step"]
            path = os.path.join(ckdir, f"step-{step}")
            logger.info("loading checkpoint from %s", path)
            t0 = time.time()
            state = {"app": app, f"dataloader.dp_rank_{dp_rank}": loader}
            dcp.load(state, checkpoint_id=path)
            start = step
            logger.info("finished loading checkpoint in %.2f s, resuming at step %d", time.time() - t0, start)

    jsonl = open(cfg["metrics"]["jsonl"], "a") if (cfg["metrics"]["jsonl"] and rank == 0) else None
    it = iter(loader)
    t_last = time.time()
    for step in range(start + 1, tc["steps"] + 1):
        x, y = next(it)
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step(); sched.step(); optim.zero_grad()
        if step % cfg["metrics"]["log_freq"] == 0:
            l = loss.detach().clone(); dist.all_reduce(l); l /= world
            dt = time.time() - t_last; t_last = time.time()
            tps = x.numel() * cfg["metrics"]["log_freq"] / dt
            logger.info("step: %d  loss: %.4f  lr: %.2e  tps: %.0f", step, l.item(), sched.get_last_lr()[0], tps)
            if jsonl is not None:
                rec = {"step": step, "loss": l, "lr": sched.get_last_lr()[0], "tps": tps}
                jsonl.write(json.dumps(rec) + "\n"); jsonl.flush()
        if ck["enable"] and step % ck["interval"] == 0:
            path = os.path.join(ckdir, f"step-{step}")
            t0 = time.time()
            dcp.save({"app": app, f"dataloader.dp_rank_{dp_rank}": loader}, checkpoint_id=path)
            logger.info("saved checkpoint to %s in %.2f s", path, time.time() - t0)
    logger.info("training completed")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
