#!/usr/bin/env python
"""Train the sensor-window transformer with Ray Train (TorchTrainer, gloo on CPU).

    python train.py --config configs/base.yaml [--set train.epochs=5 ...] [--resume CKPT_DIR]
"""
import argparse
import copy
import logging
import os

import yaml

import ray
import ray.train
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from seqcls.logutil import setup_logging
from seqcls.loop import train_func

log = logging.getLogger("seqcls")


def _merge(base, over):
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    parent = cfg.pop("inherit", None)
    if parent:
        cfg = _merge(load_config(os.path.join(os.path.dirname(path), parent)), cfg)
    return cfg


def apply_overrides(cfg, items):
    for item in items:
        key, _, raw = item.partition("=")
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(raw)
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--resume", default=None, help="checkpoint directory to start from")
    ap.add_argument("--address", default=None, help="Ray cluster address (default: start a local instance)")
    args = ap.parse_args()

    setup_logging(level="INFO", logfile=os.environ.get("SEQCLS_LOG_FILE"))
    cfg = apply_overrides(load_config(args.config), args.overrides)
    cfg["data"]["root"] = os.path.abspath(cfg["data"]["root"])
    if args.resume:
        cfg["resume_from"] = os.path.abspath(args.resume)
    tr = cfg["trainer"]

    ray.init(address=args.address, num_cpus=tr.get("ray_num_cpus"), log_to_driver=True)
    log.info("ray %s, cluster resources %s", ray.__version__, ray.cluster_resources())

    datasets = None
    if cfg["data"].get("source", "npz") == "ray":
        from seqcls.data import build_ray_dataset
        datasets = {"train": build_ray_dataset(cfg)}

    trainer = TorchTrainer(
        train_func,
        train_loop_config=cfg,
        torch_config=TorchConfig(backend=tr["backend"], timeout_s=tr["pg_timeout_s"]),
        scaling_config=ScalingConfig(num_workers=tr["num_workers"], use_gpu=tr["use_gpu"],
                                     resources_per_worker=tr.get("resources_per_worker")),
        run_config=RunConfig(
            name=tr["run_name"],
            storage_path=os.path.abspath(tr["storage_path"]),
            checkpoint_config=CheckpointConfig(num_to_keep=tr["keep_checkpoints"],
                                               checkpoint_score_attribute="val_loss",
                                               checkpoint_score_order="min"),
            failure_config=FailureConfig(max_failures=tr["max_failures"]),
        ),
        datasets=datasets,
    )
    result = trainer.fit()
    log.info("final metrics: %s", result.metrics)
    log.info("best checkpoint: %s", result.checkpoint.path if result.checkpoint else None)


if __name__ == "__main__":
    main()
