"""JSON config with dotted CLI overrides: --set ppo.lr=3e-4 --set env.size=7"""
import copy
import json

DEFAULTS = {
    "seed": 1,
    "run_dir": ".",
    "env": {"size": 6, "walls": [[2, 2], [2, 3], [3, 2]], "max_steps": 40,
            "slip_probs": [0.0], "level_files": None},
    "model": {"hidden": 64},
    "ppo": {"iterations": 20, "envs_per_rank": 2, "total_envs": None, "rollout_len": 32,
            "epochs": 2, "num_minibatches": 4, "lr": 3e-4, "gamma": 0.99, "lam": 0.95,
            "clip": 0.2, "ent_coef": 0.01, "vf_coef": 0.5},
    "eval": {"every": 5, "episodes": 8, "on_last_rank": False},
    "checkpoint": {"dir": "checkpoints", "every": 5, "resume": "auto"},
    "dist": {"backend": "gloo", "timeout_s": 30},
    "logging": {"tensorboard": False, "every": 1},
}


def _merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            _merge(a[k], v)
        else:
            a[k] = v
    return a


def _parse_value(s):
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return s


def load_config(path, overrides=()):
    cfg = copy.deepcopy(DEFAULTS)
    if path:
        with open(path) as f:
            _merge(cfg, json.load(f))
    for ov in overrides:
        key, _, val = ov.partition("=")
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(val)
    return cfg
