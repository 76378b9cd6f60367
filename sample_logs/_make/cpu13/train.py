#!/usr/bin/env python
"""Train the keyword spotter.

    python train.py --config configs/base.yaml [key.sub=value ...]

Works under `python train.py` (Lightning starts the other local processes itself),
under `torchrun` (Lightning picks up RANK/WORLD_SIZE/...), and with strategy=ddp_spawn.
"""
import argparse
import os
import sys
from datetime import timedelta

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lightning as L  # noqa: E402
from lightning.pytorch.callbacks import (EarlyStopping, LearningRateMonitor,  # noqa: E402
                                         ModelCheckpoint)
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

from kws.callbacks import EpochSummary, PredictionDumper  # noqa: E402
from kws.data import KWSDataModule  # noqa: E402
from kws.model import KeywordSpotter  # noqa: E402


def parse_value(v):
    return yaml.safe_load(v)


def load_config(path, overrides):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    for ov in overrides:
        key, _, val = ov.partition("=")
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = parse_value(val)
    return cfg


@record
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/base.yaml")
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. trainer.max_epochs=5")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)

    L.seed_everything(cfg["seed"], workers=True)
    tcfg = dict(cfg["trainer"])
    strategy = tcfg.pop("strategy")
    timeout = timedelta(seconds=cfg.get("ddp_timeout_s", 1800))
    if strategy in ("ddp", "ddp_spawn"):
        strategy = DDPStrategy(start_method="spawn" if strategy == "ddp_spawn" else "popen",
                               process_group_backend="gloo", timeout=timeout)

    dm = KWSDataModule(**cfg["data"])
    model = KeywordSpotter(**cfg["model"])

    out = cfg["out_dir"]
    callbacks = [
        ModelCheckpoint(dirpath=os.path.join(out, "checkpoints"), filename="kws-{epoch:02d}-{val_acc:.3f}",
                        monitor="val_acc", mode="max", save_top_k=2, save_last=True),
        EarlyStopping(monitor="val_loss", patience=3, mode="min"),
        LearningRateMonitor(logging_interval="step"),
        EpochSummary(),
    ]
    if cfg.get("dump_predictions"):
        callbacks.append(PredictionDumper(os.path.join(out, "predictions")))
    loggers = [CSVLogger(out, name="csv"), TensorBoardLogger(out, name="tb")]

    trainer = L.Trainer(accelerator="cpu", strategy=strategy, callbacks=callbacks, logger=loggers,
                        use_distributed_sampler=False, default_root_dir=out, **tcfg)
    trainer.fit(model, datamodule=dm, ckpt_path=cfg.get("resume"))
    if trainer.is_global_zero:
        print(f"best checkpoint: {trainer.checkpoint_callback.best_model_path}", flush=True)


if __name__ == "__main__":
    main()
