"""TOML experiment configs with `include = [...]` and dotted `--set a.b=value` overrides."""
import copy
import os
import tomllib


def _merge(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


def load(path):
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    base = {}
    for inc in cfg.pop("include", []):
        _merge(base, load(os.path.join(os.path.dirname(path), inc)))
    return _merge(base, cfg)


def _parse_value(text):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(cfg, overrides):
    for ov in overrides or []:
        key, _, val = ov.partition("=")
        node = cfg
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(val.strip())
    return cfg


class Cfg(dict):
    """dict with attribute access, recursively."""

    def __getattr__(self, k):
        try:
            v = self[k]
        except KeyError as e:
            raise AttributeError(k) from e
        return Cfg(v) if isinstance(v, dict) else v
