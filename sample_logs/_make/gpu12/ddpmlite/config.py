"""Config: JSON file + ``section.key=value`` command-line overrides."""
import copy
import json
from dataclasses import asdict, dataclass, field, fields
from typing import List


@dataclass
class ModelConfig:
    base_channels: int = 64
    channel_mult: List[int] = field(default_factory=lambda: [1, 2, 2, 2])
    num_res_blocks: int = 2
    attn_levels: List[int] = field(default_factory=lambda: [1])
    num_heads: int = 4
    dropout: float = 0.1
    num_classes: int = 10
    groups: int = 32


@dataclass
class DiffusionConfig:
    timesteps: int = 1000
    schedule: str = "linear"
    beta_start: float = 1e-4
    beta_end: float = 0.02


@dataclass
class DataConfig:
    train_dir: str = "data/train"
    partition: str = "sample"      # "sample": DistributedSampler over all shards; "shard": shards[rank::world]
    batch_size: int = 32
    num_workers: int = 2
    crop_size: int = 0             # 0: no crop
    hflip: bool = True


@dataclass
class OptimConfig:
    lr: float = 2e-4
    weight_decay: float = 0.0
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 20
    clip_grad: float = 1.0


@dataclass
class EMAConfig:
    decay: float = 0.999
    warmup: bool = True
    dtype: str = "fp32"


@dataclass
class SampleConfig:
    every: int = 20
    rank: int = -1                 # which rank renders samples; -1 = last rank
    num_images: int = 16
    batch_size: int = 16
    image_size: int = 0            # 0: training resolution
    steps: int = 50
    out_dir: str = "samples"
    fid: bool = False
    fid_ref: str = "data/fid_ref"


@dataclass
class TrainConfig:
    max_steps: int = 60
    device: str = "cuda:0"
    backend: str = "gloo"
    precision: str = "bf16"
    dist_timeout_s: int = 30
    seed: int = 1234
    log_every: int = 5
    save_every: int = 0
    ckpt_dir: str = "checkpoints"
    keep_last: int = 2
    resume: str = ""


@dataclass
class Config:
    run_name: str = "ddpm"
    model: ModelConfig = field(default_factory=ModelConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ema: EMAConfig = field(default_factory=EMAConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


PRECISIONS = ("fp32", "bf16", "fp16")


def _parse_value(s):
    try:
        return json.loads(s)
    except ValueError:
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        return s


def _apply(obj, d, prefix=""):
    names = {f.name: f for f in fields(obj)}
    for k, v in d.items():
        if k not in names:
            raise KeyError(f"unknown config key: {prefix}{k}")
        cur = getattr(obj, k)
        if hasattr(cur, "__dataclass_fields__"):
            _apply(cur, v, prefix + k + ".")
        else:
            setattr(obj, k, copy.deepcopy(v))


def load_config(path=None, overrides=()):
    cfg = Config()
    if path:
        with open(path) as f:
            _apply(cfg, json.load(f))
    for ov in overrides:
        if "=" not in ov:
            raise ValueError(f"override must look like section.key=value, got {ov!r}")
        key, val = ov.split("=", 1)
        parts = key.split(".")
        d = _parse_value(val)
        for p in reversed(parts):
            d = {p: d}
        _apply(cfg, d)
    validate(cfg)
    return cfg


def validate(cfg):
    if cfg.train.precision not in PRECISIONS:
        raise ValueError(f"train.precision must be one of {', '.join(PRECISIONS)}; got {cfg.train.precision!r}")
    if cfg.data.partition not in ("sample", "shard"):
        raise ValueError(f"data.partition must be 'sample' or 'shard'; got {cfg.data.partition!r}")
    if cfg.diffusion.schedule not in ("linear", "cosine"):
        raise ValueError(f"unknown beta schedule {cfg.diffusion.schedule!r}")
    assert 0 < cfg.ema.decay < 1, "ema.decay must be in (0, 1)"


def to_dict(cfg):
    return asdict(cfg)
