"""Config: JSON file, deep-merged over defaults, dotted overrides from the command line."""
import copy
import json

DEFAULTS = {
    "data": {"root": "data", "batch_size": 256, "fanouts": [10, 10], "num_classes": 47},
    "model": {"hidden": 128, "layers": 2, "aggr": "mean", "dropout": 0.2, "halo": False},
    "optim": {"lr": 0.003, "weight_decay": 0.0001},
    "train": {"epochs": 2, "max_steps_per_epoch": 40, "log_every": 10, "seed": 0},
    "eval": {"batch_size": 512, "metric": "acc"},
    "ckpt": {"dir": "ckpt", "resume": False},
    "dist": {"timeout_s": 60},
    "log": {"level": "INFO", "metrics_file": None},
}


class Config(dict):
    """dict with attribute access."""

    def __getattr__(self, k):
        try:
            v = self[k]
        except KeyError as e:
            raise AttributeError(k) from e
        return Config(v) if isinstance(v, dict) and not isinstance(v, Config) else v


def _merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            _merge(a[k], v)
        else:
            a[k] = v
    return a


def _wrap(d):
    return Config({k: _wrap(v) if isinstance(v, dict) else v for k, v in d.items()})


def load(path, overrides=()):
    cfg = copy.deepcopy(DEFAULTS)
    with open(path) as f:
        _merge(cfg, json.load(f))
    for ov in overrides:
        key, val = ov.split("=", 1)
        try:
            val = json.loads(val)
        except json.JSONDecodeError:
            pass
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = val
    return _wrap(cfg)
