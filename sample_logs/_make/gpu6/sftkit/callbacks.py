import logging
import math
import time

import torch

from .logging_utils import Progress

logger = logging.getLogger(__name__)


class TrainerState:
    def __init__(self):
        self.step = 0
        self.epoch = 0
        self.best_metric = None
        self.log_history = []

    def __iter__(self):
        yield "step", self.step
        yield "epoch", self.epoch
        yield "best_metric", self.best_metric


class TrainerControl:
    def __init__(self):
        self.should_stop = False
        self.should_save = False
        self.should_evaluate = False


class Callback:
    def on_train_begin(self, trainer): pass
    def on_step_end(self, trainer, logs): pass
    def on_evaluate(self, trainer, metrics): pass
    def on_train_end(self, trainer): pass


class ProgressCallback(Callback):
    def on_train_begin(self, trainer):
        self.bar = Progress(trainer.cfg.train.steps, enabled=trainer.info.is_main,
                            initial=trainer.state.step)

    def on_step_end(self, trainer, logs):
        self.bar.update(1, loss=f"{logs['loss']:.4f}", lr=f"{logs['lr']:.1e}")

    def on_train_end(self, trainer):
        self.bar.close()


class LoggingCallback(Callback):
    def __init__(self):
        self.t_last = time.time()
        self.tokens = 0

    def on_step_end(self, trainer, logs):
        self.tokens += logs["tokens"]
        every = trainer.cfg.train.log_every
        if every and trainer.state.step % every == 0:
            dt = time.time() - self.t_last
            mem = ""
            if torch.cuda.is_available():
                mem = f" | mem {torch.cuda.max_memory_allocated() / 2**30:.2f}GiB"
            logger.info("step %d/%d | loss %.4f | lr %.2e | grad_norm %.3f | tok/s %.0f%s",
                        trainer.state.step, trainer.cfg.train.steps, logs["loss"], logs["lr"],
                        logs["grad_norm"], self.tokens / max(dt, 1e-6), mem)
            self.t_last, self.tokens = time.time(), 0


class EvalCallback(Callback):
    def on_step_end(self, trainer, logs):
        every = trainer.cfg.eval.every
        if every and trainer.state.step % every == 0:
            trainer.control.should_evaluate = True


class EarlyStoppingCallback(Callback):
    def __init__(self, patience, min_delta, metric="eval_loss"):
        self.patience, self.min_delta, self.metric = patience, min_delta, metric
        self.best = math.inf
        self.bad = 0

    def on_evaluate(self, trainer, metrics):
        value = metrics[self.metric]
        if value < self.best - self.min_delta:
            self.best, self.bad = value, 0
            trainer.state.best_metric = value
        else:
            self.bad += 1
        if self.bad >= self.patience:
            logger.warning("Early stopping at step %d: %s has not improved by %g for %d evaluations "
                           "(best %.4f, last %.4f)", trainer.state.step, self.metric, self.min_delta,
                           self.bad, self.best, value)
            trainer.control.should_stop = True


class CheckpointCallback(Callback):
    def on_step_end(self, trainer, logs):
        every = trainer.cfg.checkpoint.every
        if every and trainer.state.step % every == 0:
            trainer.control.should_save = True
