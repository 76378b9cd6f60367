"""Config dataclasses, a small YAML reader and `--section.key=value` overrides."""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, List, Optional


@dataclass
class ModelConfig:
    vocab_size: int = 512
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: Optional[int] = None
    ffn_dim: int = 768
    max_seq_len: int = 512
    pos_emb: str = "rope"          # rope | learned
    rope_theta: float = 10000.0
    attn_impl: str = "sdpa"        # sdpa | eager
    tie_embeddings: bool = True
    mtp_head: bool = False         # extra multi-token-prediction head
    dropout: float = 0.0


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 8
    alpha: float = 16.0
    targets: List[str] = field(default_factory=lambda: ["wq", "wk", "wv", "wo"])
    fan_in_fan_out: bool = False
    freeze_base: bool = True


@dataclass
class DataConfig:
    kind: str = "sft"              # sft | packed
    train_path: str = "data/sft/train.jsonl"
    eval_path: str = "data/sft/eval.jsonl"
    max_seq_len: Optional[int] = 512   # sft truncation; null = keep full examples
    seq_len: int = 256             # packed chunk length
    split_by: str = "sample"       # sample | shard (packed only)
    shuffle: bool = True
    num_workers: int = 2
    timeout: float = 0.0
    clean_text: bool = False
    pad_to_multiple_of: int = 8


@dataclass
class TrainConfig:
    steps: int = 20
    micro_batch_size: int = 4
    grad_accum: int = 1
    lr: float = 3e-4
    warmup_steps: int = 2
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    precision: str = "bf16"        # bf16 | fp32
    seed: int = 1234
    log_every: int = 5
    compile: bool = False
    mtp_loss_weight: float = 0.0


@dataclass
class OptimConfig:
    name: str = "adamw"
    fused: bool = False            # use sftkit.ops._fused_adam when built
    betas: List[float] = field(default_factory=lambda: [0.9, 0.95])


@dataclass
class EvalConfig:
    every: int = 0
    batch_size: int = 4
    max_batches: int = 4
    max_seq_len: Optional[int] = None  # defaults to data.max_seq_len
    early_stopping_patience: int = 0
    early_stopping_min_delta: float = 0.0


@dataclass
class ParallelConfig:
    mode: str = "ddp"              # ddp | fsdp
    timeout_s: int = 60


@dataclass
class CheckpointConfig:
    dir: str = "outputs/ckpt"
    every: int = 0
    resume_from: str = ""          # "" | latest | step-N
    format: str = "torch"          # torch | dcp
    keep: int = 2


@dataclass
class ExportConfig:
    merge_lora: bool = False
    path: str = "outputs/export"


@dataclass
class JobConfig:
    run_name: str = "sft"
    output_dir: str = "outputs"
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    export: ExportConfig = field(default_factory=ExportConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _scalar(text: str) -> Any:
    t = text.strip()
    if t == "" or t in ("null", "~", "None"):
        return None
    if t in ("true", "True"):
        return True
    if t in ("false", "False"):
        return False
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [] if not inner else [_scalar(x) for x in inner.split(",")]
    if (t[0] == t[-1]) and t[0] in "'\"":
        return t[1:-1]
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def load_yaml(path: str) -> dict:
    """Two-level YAML subset: `section:` then indented `key: value` lines."""
    out: dict = {}
    section = None
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            key, _, val = line.strip().partition(":")
            if indent == 0 and val.strip() == "":
                section = key
                out.setdefault(section, {})
            elif indent == 0:
                out[key] = _scalar(val)
                section = None
            else:
                out[section][key] = _scalar(val)
    return out


def _apply(obj, values: dict, prefix: str = ""):
    for k, v in values.items():
        if not hasattr(obj, k):
            raise ValueError(f"unknown config key: {prefix}{k}")
        cur = getattr(obj, k)
        if dataclasses.is_dataclass(cur):
            _apply(cur, v, prefix=f"{prefix}{k}.")
        else:
            setattr(obj, k, v)


def parse_args(argv=None) -> JobConfig:
    p = argparse.ArgumentParser(description="sftkit trainer")
    p.add_argument("--config", "-c", required=True, help="YAML config")
    args, rest = p.parse_known_args(argv)
    cfg = JobConfig()
    _apply(cfg, load_yaml(args.config))
    # --section.key=value or --section.key value
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("--"):
            p.error(f"unrecognized arguments: {tok}")
        if "=" in tok:
            k, v = tok[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(rest):
                p.error(f"argument {tok}: expected one argument")
            k, v = tok[2:], rest[i + 1]
            i += 2
        parts = k.replace("-", "_").split(".")
        nested: dict = {}
        d = nested
        for part in parts[:-1]:
            d = d.setdefault(part, {})
        d[parts[-1]] = _scalar(v)
        _apply(cfg, nested)
    return cfg


def dump(cfg: JobConfig) -> str:
    return json.dumps(cfg.to_dict(), indent=2, sort_keys=False)
