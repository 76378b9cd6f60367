"""Config dataclasses, a small YAML-subset reader and `--set a.b=c` overrides."""
from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    latent_channels: int = 4
    patch_size: int = 2
    hidden_size: int = 256
    depth: int = 4
    num_heads: int = 4
    mlp_ratio: float = 4.0
    num_classes: int = 100
    class_dropout_prob: float = 0.1
    learn_sigma: bool = False
    attn_impl: str = "sdpa"          # sdpa | eager
    lora_rank: int = 0
    lora_alpha: float = 16.0


@dataclass
class DataConfig:
    train_dir: str = "data/latents/train"
    val_dir: str = "data/latents/val"
    vae_scale: int = 8
    image_size: int = 128
    num_workers: int = 2
    prefetch_factor: int = 2
    pin_memory: bool = True
    bucket_by_resolution: bool = False
    drop_last: bool = True
    hflip: bool = True
    shuffle: bool = True


@dataclass
class DiffusionConfig:
    num_timesteps: int = 1000
    beta_schedule: str = "linear"    # linear | cosine
    timestep_sampling: str = "uniform"   # uniform | stratified
    prediction: str = "eps"


@dataclass
class TrainConfig:
    batch_size: int = 32             # per rank
    grad_accum: int = 1
    max_steps: int = 60
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 10
    grad_clip: float = 1.0
    precision: str = "bf16"          # fp32 | bf16 | fp16
    parallel: str = "ddp"            # ddp | fsdp
    compile: bool = False
    ema_decay: float = 0.9999
    log_every: int = 5
    seed: int = 1234


@dataclass
class SampleConfig:
    every: int = 0
    num: int = 16
    resolution: int = 128
    steps: int = 50
    cfg_scale: float = 4.0
    decode: bool = False
    vae: str = "stabilityai/sd-vae-ft-ema"
    out_dir: str = "samples"


@dataclass
class EvalConfig:
    every: int = 0
    batches: int = 4
    fd_num_samples: int = 0
    fd_batch_size: int = 128
    fd_steps: int = 50
    cfg_scale: float = 1.5


@dataclass
class CheckpointConfig:
    dir: str = "checkpoints"
    every: int = 0
    keep_last: int = 3
    resume: str = "none"             # none | latest | <path>
    save_best: str = ""              # metric name to track, e.g. "fd"
    exact_resume: bool = False       # remember which samples were consumed, to skip them on resume


@dataclass
class DistConfig:
    timeout_s: int = 60
    find_unused_parameters: bool = False


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    run_name: str = "dit-s"
    output_dir: str = "outputs"


def _scalar(text: str) -> Any:
    t = text.strip()
    if t == "" or t in ("null", "~", "None"):
        return None
    if t in ("true", "True", "yes"):
        return True
    if t in ("false", "False", "no"):
        return False
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [] if not inner else [_scalar(x) for x in inner.split(",")]
    if (t[0] == t[-1]) and t[0] in "'\"":
        return t[1:-1]
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError):
        return t


def load_yaml(path: str) -> dict:
    """Reads the indentation-nested `key: value` subset of YAML our configs use."""
    root: dict = {}
    stack = [(-1, root)]
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip(" "))
            key, sep, value = line.strip().partition(":")
            if not sep:
                raise ValueError(f"{path}:{lineno}: expected 'key: value'")
            while stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1]
            if value.strip() == "":
                parent[key] = {}
                stack.append((indent, parent[key]))
            else:
                parent[key] = _scalar(value)
    return root


def _apply(obj, data: dict, prefix=""):
    for k, v in data.items():
        if not hasattr(obj, k):
            raise KeyError(f"unknown config key '{prefix}{k}'")
        cur = getattr(obj, k)
        if dataclasses.is_dataclass(cur):
            _apply(cur, v, prefix + k + ".")
        else:
            if isinstance(cur, float) and isinstance(v, int):
                v = float(v)
            setattr(obj, k, v)


def build_config(path: str | None, overrides: list[str]) -> Config:
    cfg = Config()
    if path:
        _apply(cfg, load_yaml(path))
    for ov in overrides or []:
        key, _, value = ov.partition("=")
        node: dict = {}
        cur = node
        parts = key.strip().split(".")
        for p in parts[:-1]:
            cur[p] = {}
            cur = cur[p]
        cur[parts[-1]] = _scalar(value)
        _apply(cfg, node)
    return cfg


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)
