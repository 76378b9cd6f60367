"""Typed config: dataclasses, filled from a TOML file and `--set section.key=value` overrides."""
from __future__ import annotations

import ast
import dataclasses
import tomllib
from dataclasses import dataclass, field


@dataclass
class DataConfig:
    root: str = "data/synthetic"
    num_workers: int = 2
    batch_size: int = 32          # per rank
    image_size: int = 16
    prefetch_factor: int = 2


@dataclass
class AugConfig:
    mixup_alpha: float = 0.2
    cutmix_alpha: float = 1.0
    prob: float = 0.8
    switch_prob: float = 0.5
    label_smoothing: float = 0.1


@dataclass
class ModelConfig:
    arch: str = "resnet_tiny"
    in_chans: int = 3
    width: int = 16
    num_classes: int = 10
    drop_rate: float = 0.0


@dataclass
class OptimConfig:
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    clip_grad: float = 1.0
    warmup_steps: int = 5
    amp: bool = False


@dataclass
class TrainConfig:
    epochs: int = 2
    max_steps: int = -1
    seed: int = 42
    skip_nonfinite: bool = True
    ema_decay: float = 0.0       # 0 disables the EMA
    dist_timeout_s: int = 30


@dataclass
class CheckpointConfig:
    dir: str = "checkpoints"
    every_epochs: int = 1
    every_minutes: float = 0.0   # 0 disables time-based saving
    save_optimizer: bool = False
    resume: str = ""


@dataclass
class LogConfig:
    every: int = 5
    metrics_csv: bool = True
    preview_grid: bool = False
    out_dir: str = "outputs"


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    aug: AugConfig = field(default_factory=AugConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def to_dict(self):
        return dataclasses.asdict(self)


def _coerce(value: str, current):
    if isinstance(current, bool):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(current, int) and not isinstance(current, bool):
        return int(value)
    if isinstance(current, float):
        return float(value)
    if isinstance(current, str):
        return value
    return ast.literal_eval(value)


def _apply(cfg: Config, section: str, key: str, value, from_cli: bool):
    sec = getattr(cfg, section)
    if not hasattr(sec, key):
        raise KeyError(f"unknown config key {section}.{key}")
    cur = getattr(sec, key)
    setattr(sec, key, _coerce(value, cur) if from_cli else type(cur)(value) if not isinstance(cur, bool) else bool(value))


def load_config(path: str | None, overrides: list[str]) -> Config:
    cfg = Config()
    if path:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        for section, values in raw.items():
            for key, value in values.items():
                _apply(cfg, section, key, value, from_cli=False)
    for ov in overrides:
        k, v = ov.split("=", 1)
        section, key = k.split(".", 1)
        _apply(cfg, section, key, v, from_cli=True)
    return cfg
