"""Nested JSON configs with dotted command-line overrides (``train.lr=3e-4``)."""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any


@dataclass
class ModelConfig:
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    dropout: float = 0.0
    bias: bool = False


@dataclass
class DataConfig:
    path: str = "data/tokens"
    mode: str = "packed"            # packed | documents
    max_seq_len: int = 1024         # documents mode: truncate each document to this many tokens
    num_workers: int = 2
    pin_memory: bool = True
    val_batches: int = 8            # <= 0: evaluate on the whole validation shard


@dataclass
class TrainConfig:
    micro_batch_size: int = 8
    grad_accum_steps: int = 1
    max_steps: int = 200
    lr: float = 6e-4
    min_lr: float = 6e-5
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    log_every: int = 1
    eval_every: int = 50
    ckpt_every: int = 100
    out_dir: str = "out"
    resume: str = ""                # "" | "auto" | path to a checkpoint
    compile: bool = False
    compile_fullgraph: bool = False
    seed: int = 1337


@dataclass
class SystemConfig:
    device: str = "cuda"
    dtype: str = "bfloat16"
    backend: str = "nccl"
    share_gpu: bool = False         # several ranks on one GPU (cuda:0), gloo collectives
    gpu_memory_fraction: float = 0.0  # cap per process when sharing a GPU (0 = no cap)
    pg_timeout_s: int = 600
    log_file: str = ""              # e.g. "logs/train_rank{rank}.log"
    wandb: bool = False
    wandb_project: str = "lm-pretrain"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    system: SystemConfig = field(default_factory=SystemConfig)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: dict(vars(getattr(self, f.name))) for f in fields(self)}


def _coerce(old: Any, raw: str) -> Any:
    if isinstance(old, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {raw!r}")
    if isinstance(old, int):
        return int(raw)
    if isinstance(old, float):
        return float(raw)
    return raw


def load_config(path: str | None, overrides: list[str]) -> Config:
    cfg = Config()
    raw: dict[str, Any] = {}
    if path:
        with open(path) as fh:
            raw = json.load(fh)
    for section, values in raw.items():
        sub = getattr(cfg, section)
        for key, value in values.items():
            if not hasattr(sub, key):
                raise KeyError(f"unknown config key {section}.{key} in {path}")
            setattr(sub, key, value)
    for item in overrides:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        sub = getattr(cfg, section, None)
        if sub is None or not is_dataclass(sub) or not hasattr(sub, name):
            raise KeyError(f"unknown config key {key!r}")
        setattr(sub, name, _coerce(getattr(sub, name), value))
    return copy.deepcopy(cfg)
