"""Configuration: dataclass sections, TOML file, `section.key=value` overrides."""
from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field


@dataclass
class ModelCfg:
    img_size: int = 32
    patch_size: int = 4
    in_chans: int = 3
    embed_dim: int = 192
    depth: int = 6
    num_heads: int = 3
    mlp_ratio: float = 4.0
    drop_path: float = 0.1
    num_classes: int = 10
    grad_ckpt: bool = False


@dataclass
class DataCfg:
    root: str = "data/train"
    val_root: str = "data/val"
    img_size: int = 32
    batch_size: int = 64
    num_workers: int = 2
    pin_memory: bool = True
    partition: str = "sample"
    drop_unlabeled: bool = True
    aug_device: str = "cpu"
    mean: list = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list = field(default_factory=lambda: [0.229, 0.224, 0.225])


@dataclass
class AugCfg:
    mixup_alpha: float = 0.2
    label_smoothing: float = 0.1
    hflip: bool = True
    crop_pad: int = 4


@dataclass
class OptimCfg:
    lr: float = 1e-3
    weight_decay: float = 0.05
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 20
    min_lr: float = 1e-5
    clip_grad: float = 1.0


@dataclass
class AmpCfg:
    init_scale: float = 65536.0
    growth_interval: int = 2000


@dataclass
class CompileCfg:
    enabled: bool = False
    backend: str = "inductor"
    mode: str = "default"
    fullgraph: bool = True
    dynamic: bool = False
    recompile_limit: int = 4


@dataclass
class EmaCfg:
    enabled: bool = True
    decay: float = 0.999


@dataclass
class EvalCfg:
    every: int = 50
    batch_size: int = 128
    attn_maps: bool = False
    map_size: int = 32
    map_images: int = 16


@dataclass
class LogCfg:
    every: int = 10
    tracker: str = "jsonl"


@dataclass
class CkptCfg:
    dir: str = "checkpoints"
    every: int = 0
    keep: int = 2
    resume: str = ""


@dataclass
class TrainCfg:
    max_steps: int = 200
    seed: int = 0
    device: str = "cuda"
    backend: str = "gloo"
    precision: str = "bf16"
    channels_last: bool = True
    dist_timeout_s: int = 30


@dataclass
class Config:
    model: ModelCfg = field(default_factory=ModelCfg)
    data: DataCfg = field(default_factory=DataCfg)
    aug: AugCfg = field(default_factory=AugCfg)
    optim: OptimCfg = field(default_factory=OptimCfg)
    amp: AmpCfg = field(default_factory=AmpCfg)
    compile: CompileCfg = field(default_factory=CompileCfg)
    ema: EmaCfg = field(default_factory=EmaCfg)
    eval: EvalCfg = field(default_factory=EvalCfg)
    log: LogCfg = field(default_factory=LogCfg)
    ckpt: CkptCfg = field(default_factory=CkptCfg)
    train: TrainCfg = field(default_factory=TrainCfg)


def _parse_value(text: str):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # bare strings need no quotes on the command line


def _apply(cfg: Config, section: str, key: str, value, origin: str):
    if not hasattr(cfg, section):
        raise KeyError(f"unknown config section '{section}' ({origin})")
    sec = getattr(cfg, section)
    if key not in {f.name for f in dataclasses.fields(sec)}:
        raise KeyError(f"unknown config key '{section}.{key}' ({origin})")
    cur = getattr(sec, key)
    if isinstance(cur, bool) and not isinstance(value, bool):
        value = str(value).lower() in ("1", "true", "yes", "on")
    elif isinstance(cur, float) and isinstance(value, int):
        value = float(value)
    elif isinstance(cur, int) and not isinstance(cur, bool) and isinstance(value, str):
        value = int(value)
    setattr(sec, key, value)


def load_config(path: str | None, overrides: list[str]) -> Config:
    cfg = Config()
    if path:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        for section, body in raw.items():
            for key, value in body.items():
                _apply(cfg, section, key, value, path)
    for ov in overrides:
        if "=" not in ov or "." not in ov.split("=", 1)[0]:
            raise ValueError(f"override must look like section.key=value, got {ov!r}")
        dotted, text = ov.split("=", 1)
        section, key = dotted.split(".", 1)
        _apply(cfg, section, key, _parse_value(text), "command line")
    validate(cfg)
    return cfg


def validate(cfg: Config):
    if cfg.train.precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"train.precision must be fp32, bf16 or fp16, got {cfg.train.precision!r}")
    if cfg.data.partition not in ("sample", "shard"):
        raise ValueError(f"data.partition must be 'sample' or 'shard', got {cfg.data.partition!r}")
    if cfg.model.embed_dim % cfg.model.num_heads:
        raise ValueError(f"model.embed_dim={cfg.model.embed_dim} is not a multiple of "
                         f"model.num_heads={cfg.model.num_heads}")
    if cfg.model.img_size % cfg.model.patch_size:
        raise ValueError(f"model.img_size={cfg.model.img_size} is not a multiple of "
                         f"model.patch_size={cfg.model.patch_size}")
    if cfg.log.tracker not in ("jsonl", "aim", "none"):
        raise ValueError(f"log.tracker must be jsonl, aim or none, got {cfg.log.tracker!r}")


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def dump_toml(d: dict) -> str:
    """Tiny TOML writer for {section: {key: scalar | list}} (enough for run configs)."""
    out = []
    for section, body in d.items():
        out.append(f"[{section}]")
        for k, v in body.items():
            out.append(f"{k} = {json.dumps(v)}")
        out.append("")
    return "\n".join(out)
