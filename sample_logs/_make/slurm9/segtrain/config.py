"""JSON configs with "extends" and dotted key=value overrides."""
import json
import os


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def load(path):
    with open(path) as f:
        cfg = json.load(f)
    base = cfg.pop("extends", None)
    if base:
        cfg = _merge(load(os.path.join(os.path.dirname(path), base)), cfg)
    return cfg


def _parse(v):
    try:
        return json.loads(v)
    except ValueError:
        return v


def apply_overrides(cfg, items):
    for item in items:
        key, _, val = item.partition("=")
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse(val)
    return cfg
