"""JSON config with dotted CLI overrides (``--set train.epochs=3``)."""
import copy
import json

DEFAULTS = {
    "data": {
        "root": "data",
        "manifest": "manifest.json",
        "node_cache": False,          # stage shards to node-local scratch first
        "cache_dir": "${LOCAL_SCRATCH}/shards",
    },
    "model": {
        "img_size": 32, "patch_size": 4, "in_chans": 3,
        "embed_dim": 64, "depth": 2, "num_heads": 4,
        "decoder_embed_dim": 32, "decoder_depth": 1, "decoder_num_heads": 4,
        "mlp_ratio": 4.0, "mask_ratio": 0.75, "norm_pix_loss": True,
    },
    "train": {
        "epochs": 2, "global_batch_size": 64, "lr": 1.5e-4, "weight_decay": 0.05,
        "warmup_steps": 4, "log_every": 2, "seed": 0,
    },
    "eval": {"every_epochs": 1, "batch_size": 64, "num_images": 0, "save_images": False},
    "ckpt": {"dir": "ckpt", "resume": "auto", "every_epochs": 1, "requeue_on_signal": False},
    "dist": {"backend": "gloo", "timeout_s": 30},
}


def _merge(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def _parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def load_config(path=None, overrides=()):
    cfg = copy.deepcopy(DEFAULTS)
    if path:
        with open(path) as f:
            _merge(cfg, json.load(f))
    for item in overrides:
        key, _, raw = item.partition("=")
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(raw)
    return cfg
