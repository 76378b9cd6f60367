"""Trainer callbacks."""
import logging
import time

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class ThroughputCallback(TrainerCallback):
    """Logs optimizer steps per second."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.t0 = time.time()
            self.steps_seen = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps_seen += 1
        if state.is_world_process_zero and state.global_step % max(args.logging_steps, 1) == 0:
            dt = time.time() - self.t0
            logger.info("throughput: %.2f steps/s", self.steps_seen / max(dt, 1e-6))


class EvalLossPrinter(TrainerCallback):
    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if state.is_world_process_zero and metrics:
            logger.info("eval @ step %d: %s", state.global_step, {k: round(v, 4) for k, v in metrics.items()})
