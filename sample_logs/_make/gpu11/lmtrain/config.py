"""Config dataclasses, loaded from a JSON file plus `a.b=c` overrides."""
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    d_model: int = 256
    n_heads: int = 8
    n_layers: int = 4
    ffn_multiple_of: int = 256
    attn_impl: str = "sdpa"          # sdpa | eager | flash
    dropout: float = 0.0
    tie_embeddings: bool = True
    rope_theta: float = 10000.0


@dataclass
class DataConfig:
    train_dir: str = "data/train"
    val_dir: str = "data/val"
    seq_len: int = 256
    packing: bool = True              # False: one document per sample, padded to the longest in the batch
    max_doc_len: int = 0              # 0 = no truncation
    micro_batch_size: int = 8
    num_workers: int = 2
    prefetch_factor: int = 2
    collate_device: str = ""          # move batches to this device inside the collate fn
    pin_memory: bool = True
    seed: int = 1234


@dataclass
class OptimConfig:
    lr: float = 3e-4
    min_lr: float = 3e-5
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    warmup_steps: int = 10
    clip_grad: float = 1.0


@dataclass
class TrainConfig:
    max_steps: int = 50
    max_tokens: int = 0               # stop after this many (non-pad) tokens; 0 = use max_steps
    grad_accum: int = 1
    precision: str = "bf16"           # fp32 | bf16 | fp16
    compile: bool = False
    device: str = "cuda"
    device_index: int = -1            # -1: LOCAL_RANK
    backend: str = "nccl"
    dist_timeout_s: int = 60
    log_every: int = 5
    eval_every: int = 20
    eval_batches: int = 4
    eval_jsonl: str = ""              # append eval metrics to this file (last rank)
    save_every: int = 0
    ckpt_dir: str = "checkpoints"
    resume: str = ""                  # "", "latest" or a path
    keep_last: int = 3
    seed: int = 42
    out_dir: str = "outputs"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    run_name: str = "lm-pretrain"


def _coerce(cur, val: str):
    if isinstance(cur, bool):
        return val.lower() in ("1", "true", "yes", "on")
    if isinstance(cur, int):
        return int(val)
    if isinstance(cur, float):
        return float(val)
    if isinstance(cur, tuple):
        return tuple(float(x) for x in val.strip("()").split(","))
    return val


def _update(obj, d):
    for k, v in d.items():
        cur = getattr(obj, k)
        if dataclasses.is_dataclass(cur):
            _update(cur, v)
        else:
            setattr(obj, k, tuple(v) if isinstance(cur, tuple) else v)


def load_config(path: Optional[str], overrides) -> Config:
    cfg = Config()
    if path:
        with open(path) as f:
            _update(cfg, json.load(f))
    for ov in overrides or []:
        key, _, val = ov.partition("=")
        *parents, leaf = key.split(".")
        obj = cfg
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, leaf, _coerce(getattr(obj, leaf), val))
    return cfg


def to_dict(cfg: Config):
    return dataclasses.asdict(cfg)
