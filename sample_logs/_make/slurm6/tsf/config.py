"""TOML experiment configs with `base = "other.toml"` inheritance and `--set a.b=value` overrides."""
import copy
import re
import tomllib
from pathlib import Path

_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?\d+\.\d*$|^-?\d*\.\d+$")


def _merge(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


def load(path):
    path = Path(path)
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    base = cfg.pop("base", None)
    if base:
        cfg = _merge(load(path.parent / base), cfg)
    return cfg


def parse_value(v):
    if v in ("true", "false"):
        return v == "true"
    if _INT.match(v):
        return int(v)
    if _FLOAT.match(v):
        return float(v)
    if v.startswith("[") and v.endswith("]"):
        return [parse_value(x.strip()) for x in v[1:-1].split(",") if x.strip()]
    return v.strip('"')


def apply_overrides(cfg, overrides):
    for ov in overrides or []:
        key, _, val = ov.partition("=")
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = parse_value(val)
    return cfg
