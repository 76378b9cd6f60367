#!/usr/bin/env python
"""tinyasr: joint CTC/attention speech recognizer training."""
import argparse
import dataclasses
import json
import logging
import os
import socket
import sys
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from tinyasr import __version__
from tinyasr.data import BucketBatchSampler, FeatureExtractor, ShardedManifest, collate
from tinyasr.model import AsrModel, SpecAugment
from tinyasr.text import CharTokenizer
from tinyasr.trainer import CheckpointManager, ProgressCallback, Trainer, WerEvalCallback


@dataclass
class ModelConfig:
    input_dim: int = 80
    d_model: int = 144
    heads: int = 4
    layers: int = 4
    dec_layers: int = 2
    ctc_weight: float = 0.3
    lora_rank: int = 0


@dataclass
class DataConfig:
    root: str = "data"
    n_mels: int = 80
    max_frames: int = 3000
    num_workers: int = 2
    vocab: str = "letters"
    specaug: bool = True
    freq_mask: int = 27


@dataclass
class TrainConfig:
    max_steps: int = 20
    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup_steps: int = 10
    grad_accum: int = 1
    clip: float = 5.0
    precision: str = "bf16"
    log_every: int = 5
    eval_every: int = 10
    save_every: int = 0
    ckpt_dir: str = "exp/ckpt"
    resume: str = ""
    seed: int = 1234
    compile: bool = False
    ctc_impl: str = "native"
    dist_timeout: int = 60
    sampler: str = "bucket"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


def parse():
    p = argparse.ArgumentParser("tinyasr")
    p.add_argument("--config", default=None, help="JSON config file")
    p.add_argument("--sampler", choices=["bucket", "random"], default=None)
    p.add_argument("--ctc-impl", choices=["native", "warp"], default=None)
    p.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default=None)
    p.add_argument("--resume", default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--spawn", type=int, default=0, help="start N local processes with torch.multiprocessing.spawn")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    a = p.parse_args()
    cfg = Config()
    if a.config:
        with open(a.config) as f:
            raw = json.load(f)
        for sec, vals in raw.items():
            for k, v in vals.items():
                setattr(getattr(cfg, sec), k, v)
    for kv in a.set:
        key, val = kv.split("=", 1)
        sec, k = key.split(".")
        cur = getattr(getattr(cfg, sec), k)
        setattr(getattr(cfg, sec), k, type(cur)(val) if not isinstance(cur, bool) else val.lower() in ("1", "true"))
    for name, sec, k in [("sampler", "train", "sampler"), ("ctc_impl", "train", "ctc_impl"),
                         ("precision", "train", "precision"), ("resume", "train", "resume"),
                         ("max_steps", "train", "max_steps")]:
        if getattr(a, name) is not None:
            setattr(getattr(cfg, sec), k, getattr(a, name))
    return a, cfg


def setup_logging(rank):
    fmt = f"[%(asctime)s][%(name)s][%(levelname)s][rank{rank}] %(message)s"
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format=fmt, stream=sys.stdout, force=True)
    logging.getLogger("tinyasr.data").setLevel(logging.INFO)


def run(local_rank, cfg, spawn_world=0):
    if spawn_world:
        os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(local_rank)
        os.environ["WORLD_SIZE"] = os.environ["LOCAL_WORLD_SIZE"] = str(spawn_world)
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    setup_logging(rank)
    log = logging.getLogger("tinyasr")
    use_cuda = torch.cuda.is_available() and os.environ.get("TINYASR_CPU", "0") != "1"
    if use_cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        if cfg.train.precision == "bf16":
            cfg.train.precision = "fp32"
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=cfg.train.dist_timeout))
    if rank == 0:
        log.info("tinyasr %s | torch %s | host %s | world %d | device %s", __version__, torch.__version__,
                 socket.gethostname(), world, device)
        log.info("config:\n%s", json.dumps(dataclasses.asdict(cfg), indent=2))
    torch.manual_seed(cfg.train.seed)

    tok = CharTokenizer(cfg.data.vocab)
    feats = FeatureExtractor(n_mels=cfg.data.n_mels)
    train_ds = ShardedManifest(cfg.data.root, "train", rank, world, tok, feats)
    val_ds = ShardedManifest(cfg.data.root, "dev", rank, world, tok, feats)
    sampler = BucketBatchSampler(train_ds, cfg.data.max_frames, shuffle=True, seed=cfg.train.seed)
    train_loader = torch.utils.data.DataLoader(train_ds, batch_sampler=sampler, collate_fn=collate,
                                               num_workers=cfg.data.num_workers, pin_memory=use_cuda,
                                               persistent_workers=cfg.data.num_workers > 0)
    val_loader = torch.utils.data.DataLoader(val_ds, batch_sampler=BucketBatchSampler(val_ds, cfg.data.max_frames, shuffle=False),
                                             collate_fn=collate, num_workers=0)

    model = AsrModel(cfg.model, tok.vocab_size)
    if cfg.train.ctc_impl == "warp":
        from warpctc_pytorch import CTCLoss  # noqa: F401  (Baidu warp-ctc binding)
        log.info("using warp-ctc loss")
    if cfg.model.lora_rank:
        for n, p in model.named_parameters():
            p.requires_grad = "lora_" in n or n.startswith("ctc_head")
    model.to(device)
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        log.info("model: %.2fM parameters, vocab %d", n_params / 1e6, tok.vocab_size)
    if cfg.train.compile:
        model = torch.compile(model)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None,
                                                          find_unused_parameters=False)
    specaug = SpecAugment(freq_mask=cfg.data.freq_mask) if cfg.data.specaug else None
    ckpt = CheckpointManager(cfg.train.ckpt_dir, cfg.train.save_every)
    callbacks = [ProgressCallback(), WerEvalCallback(val_loader), ckpt]
    trainer = Trainer(cfg.train, model, tok, train_loader, device, rank, world, callbacks, specaug)
    if cfg.train.resume:
        path = ckpt.latest() if cfg.train.resume == "auto" else cfg.train.resume
        if path:
            ckpt.load(trainer, path)
    trainer.train()
    if cfg.train.save_every:
        ckpt.save(trainer)
    if rank == 0:
        log.info("done: %d steps, metrics %s", trainer.step, json.dumps(trainer.metrics))
    if world > 1:
        dist.destroy_process_group()


@record
def main():
    args, cfg = parse()
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        torch.multiprocessing.spawn(run, args=(cfg, args.spawn), nprocs=args.spawn, join=True)
    else:
        run(int(os.environ.get("LOCAL_RANK", 0)), cfg)


if __name__ == "__main__":
    main()
