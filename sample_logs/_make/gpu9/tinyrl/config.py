"""Config dataclasses, JSON config files and ``--set section.key=value`` overrides."""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ModelConfig:
    vocab_size: int = 512
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 8
    max_seq_len: int = 256
    init_from: Optional[str] = None
    dropout: float = 0.0


@dataclass
class LoraConfig:
    enabled: bool = True
    r: int = 8
    alpha: float = 16.0
    targets: str = "qkv,proj"


@dataclass
class RefConfig:
    device_offset: int = 0      # place the frozen reference on local_rank + offset


@dataclass
class RewardConfig:
    kinds: str = "match,rm"
    rm_path: Optional[str] = None
    hidden: int = 192
    share_backbone: bool = False   # score with a value head on the policy's last hidden state
    sandbox_timeout: Optional[float] = None
    sandbox_python: Optional[str] = None   # default: this interpreter
    rm_weight: float = 0.5


@dataclass
class RolloutConfig:
    prompts_per_rank: int = 4
    num_generations: int = 4
    max_new_tokens: int = 24
    temperature: float = 1.0
    top_k: int = 50


@dataclass
class DataConfig:
    path: str = "data/prompts"
    num_workers: int = 2
    pad_id: int = 0
    eos_id: int = 1
    bos_id: int = 2
    seed: int = 1234


@dataclass
class OptimConfig:
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.99)
    fused: Optional[bool] = None
    foreach: Optional[bool] = None
    grad_clip: float = 1.0


@dataclass
class ParallelConfig:
    layout: str = "ddp"          # ddp | fsdp2
    dp_shard: int = -1
    tp: int = 1


@dataclass
class TrainConfig:
    max_steps: int = 6
    grad_accum: int = 2
    kl_coef: float = 0.04
    clip_eps: float = 0.2
    amp: str = "auto"            # auto | bf16 | fp32
    compile: bool = False
    log_every: int = 1
    samples_every: int = 2
    eval_every: int = 3
    output_dir: str = "outputs"
    resume: bool = False
    save_every: int = 2
    nccl_timeout_s: int = 60


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    device: str = "auto"
    spawn: int = 0
    run_name: str = "grpo"


def _coerce(value: str, current: Any, ftype: Any) -> Any:
    if value.lower() in ("none", "null"):
        return None
    if isinstance(current, bool) or ftype in (bool, "bool", "Optional[bool]"):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(current, int) or ftype in (int, "int", "Optional[int]"):
        return int(float(value)) if "e" in value.lower() else int(value)
    if isinstance(current, float) or ftype in (float, "float", "Optional[float]"):
        return float(value)
    if isinstance(current, tuple):
        return tuple(float(v) for v in value.split(","))
    return value


def apply_overrides(cfg: Config, items: dict) -> None:
    for key, value in items.items():
        section, _, name = key.rpartition(".")
        target = getattr(cfg, section) if section else cfg
        if not hasattr(target, name):
            raise KeyError(f"unknown config key {key!r}")
        fdef = {f.name: f for f in dataclasses.fields(target)}[name]
        cur = getattr(target, name)
        if isinstance(value, str):
            value = _coerce(value, cur, fdef.type)
        setattr(target, name, value)


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def parse_args(argv=None) -> Config:
    p = argparse.ArgumentParser(description="tinyrl GRPO trainer")
    p.add_argument("--config", action="append", default=[], help="JSON config file(s), applied in order")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--spawn", type=int, default=0, help="start N workers with torch.multiprocessing.spawn")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    cfg = Config()
    for path in args.config:
        with open(path) as f:
            apply_overrides(cfg, _flatten(json.load(f)))
    ov = {}
    for item in args.overrides:
        k, _, v = item.partition("=")
        ov[k.strip()] = v.strip()
    apply_overrides(cfg, ov)
    if args.spawn:
        cfg.spawn = args.spawn
    if args.resume:
        cfg.train.resume = True
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)
