"""Config dataclasses, JSON config files and dotted `key=value` overrides."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, List


@dataclass
class ModelConfig:
    image_size: int = 64
    patch_size: int = 8
    in_chans: int = 3
    vision_width: int = 256
    vision_layers: int = 4
    vision_heads: int = 4
    text_width: int = 256
    text_layers: int = 4
    text_heads: int = 4
    vocab_size: int = 260
    context_length: int = 32
    embed_dim: int = 256
    num_classes: int = 0          # >0 adds an auxiliary classification head on the image tower
    lora_rank: int = 0            # >0 adds LoRA adapters to every attention projection
    lora_alpha: float = 16.0
    dtype: str = "float32"        # parameter dtype


@dataclass
class DataConfig:
    train_shards: str = "data/train/shard-{0000..0007}.tar"
    eval_shards: str = "data/eval/shard-{0000..0000}.tar"
    format: str = "tar"           # tar | npy-cache
    cache_dir: str = "data/cache"
    decoder: str = "numpy"        # numpy | turbojpeg
    crop_size: int = 64
    batch_size: int = 32
    eval_batch_size: int = 64
    num_workers: int = 2
    prefetch_factor: int = 2
    max_eval_samples: int = 0     # 0 = all


@dataclass
class OptimConfig:
    lr: float = 5e-4
    wd: float = 0.1
    betas: List[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-6
    warmup_steps: int = 5
    schedule: str = "cosine"
    grad_clip: float = 1.0
    fused: bool = False


@dataclass
class LossConfig:
    gather_with_grad: bool = True
    local_loss: bool = False
    neg_queue_size: int = 0       # MoCo-style queue of extra text negatives
    aux_weight: float = 0.1


@dataclass
class TrainConfig:
    max_steps: int = 40
    grad_accum: int = 1
    precision: str = "bf16"       # fp32 | bf16 | fp16
    compile: bool = False
    compile_backend: str = "inductor"
    ema_decay: float = 0.0
    freeze_text_tower: bool = False
    seed: int = 1234
    log_every: int = 5
    eval_every: int = 20
    recall_at: List[int] = field(default_factory=lambda: [1, 5, 10])
    save_every: int = 20
    output_dir: str = "outputs/run"
    resume: str = ""              # "" | "auto" | path


@dataclass
class DistConfig:
    backend: str = "auto"         # auto | nccl | gloo
    strategy: str = "ddp"         # ddp | fsdp2
    timeout_s: int = 60
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    find_unused_parameters: bool = False


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    run_name: str = "clip-vit-s8"


def _coerce(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _build(cls, data: dict):
    return cls(**data)


def load_config(path: str | None, overrides: List[str]) -> Config:
    tree: dict = {}
    if path:
        with open(path) as fh:
            tree = json.load(fh)
    for ov in overrides:
        if "=" not in ov:
            raise ValueError(f"override must look like key=value, got {ov!r}")
        k, v = ov.split("=", 1)
        _set_dotted(tree, k.lstrip("-"), _coerce(v))
    sections = {}
    for name in ("model", "data", "optim", "loss", "train", "dist"):
        sec_cls = type(getattr(Config(), name))
        sections[name] = _build(sec_cls, tree.pop(name, {}))
    return Config(**sections, **tree)


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)
