"""Experiment tracking: Weights & Biases when enabled, otherwise a no-op."""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class NullTracker:
    def log(self, metrics: dict, step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker:
    def __init__(self, project: str, config: dict, rank: int):
        import wandb

        self.run = wandb.init(project=project, config=config, group="pretrain", name=f"rank{rank}",
                              mode="offline")

    def log(self, metrics: dict, step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        self.run.finish()


def make_tracker(enabled: bool, project: str, config: dict, rank: int):
    if not enabled:
        return NullTracker()
    return WandbTracker(project, config, rank)
