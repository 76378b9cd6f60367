"""Trainer callbacks: progress bar, loss guard, per-task metrics, checkpoints."""

from __future__ import annotations

import concurrent.futures
import logging
import math
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

from trainer_utils import TrainerCallback, format_time

logger = logging.getLogger("trainer")


class ProgressBar:
    """Minimal tqdm look-alike (rank 0 only)."""

    _PARTIAL = " ▏▎▍▌▋▊▉"

    def __init__(self, total, desc="", file=None, mininterval=0.1, width=10):
        self.total = total
        self.desc = desc
        self.file = file or sys.stderr
        self.mininterval = mininterval
        self.width = width
        self.n = 0
        self.start = time.time()
        self.last_print = 0.0
        self.last_len = 0
        self.postfix = ""
        self._render(force=True)

    def _bar(self, frac):
        filled = frac * self.width
        full = int(filled)
        if full >= self.width:
            return "█" * self.width
        return ("█" * full + self._PARTIAL[int((filled - full) * 8)]).ljust(self.width)

    def _render(self, force=False):
        now = time.time()
        if not force and now - self.last_print < self.mininterval:
            return
        self.last_print = now
        elapsed = now - self.start
        frac = self.n / self.total if self.total else 0.0
        rate = self.n / elapsed if elapsed > 0 and self.n else None
        remaining = (self.total - self.n) / rate if rate else None
        rate_s = f"{rate:5.2f}it/s" if rate else "?it/s"
        rem_s = format_time(remaining) if remaining is not None else "?"
        post = f", {self.postfix}" if self.postfix else ""
        desc = f"{self.desc}: " if self.desc else ""
        line = f"{desc}{frac * 100:3.0f}%|{self._bar(frac)}| {self.n}/{self.total} [{format_time(elapsed)}<{rem_s}, {rate_s}{post}]"
        pad = " " * max(self.last_len - len(line), 0)
        self.file.write("\r" + line + pad)
        self.file.flush()
        self.last_len = len(line)

    def update(self, n=1, postfix=None):
        self.n += n
        if postfix is not None:
            self.postfix = postfix
        self._render(force=self.n >= self.total)

    def write(self, msg):
        self.file.write("\r" + " " * self.last_len + "\r")
        self.file.flush()
        print(msg, flush=True)
        self._render(force=True)

    def close(self):
        self._render(force=True)
        self.file.write("\n")
        self.file.flush()


class ProgressCallback(TrainerCallback):
    def __init__(self, is_main):
        self.is_main = is_main
        self.bar = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.is_main:
            self.bar = ProgressBar(state.max_steps)
            self._start_step = state.global_step
            if state.global_step:
                self.bar.n = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            loss = state.last_local_loss
            self.bar.update(1, postfix=f"loss={loss:.2f}" if loss is not None else None)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is not None and logs:
            self.bar.write(str(logs))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.bar is not None and metrics:
            self.bar.write(str({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}))

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class LossGuardCallback(TrainerCallback):
    """Stop as soon as the (local) loss stops being finite."""

    def on_step_end(self, args, state, control, **kwargs):
        loss_value = state.last_local_loss
        if loss_value is not None and not math.isfinite(loss_value):
            print("Loss is {}, stopping training".format(loss_value))
            sys.exit(1)


class TaskMetricsCallback(TrainerCallback):
    """Logs per-task eval accuracy next to the global eval loss."""

    def __init__(self, tasks):
        self.tasks = list(tasks)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        parts = []
        for task in self.tasks:
            acc = metrics[f"eval_acc_{task}"]
            parts.append(f"{task}={acc:.3f}")
        logger.info("step %d per-task accuracy: %s (eval_loss=%.4f)", state.global_step, ", ".join(parts), metrics["eval_loss"])


class AsyncCheckpointCallback(TrainerCallback):
    """Writes checkpoints from a background thread so that training is not
    blocked by the file system. Only the main process writes."""

    def __init__(self, is_main):
        self.is_main = is_main
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-writer")
        self._pending = None
        warnings.warn("async_save=True: RNG states are not saved, resumed runs will not be bit-exact", UserWarning)

    def _write(self, ckpt_dir, model_state, optim_state, sched_state, state):
        os.makedirs(ckpt_dir, exist_ok=True)
        torch.save(model_state, os.path.join(ckpt_dir, "model.pt"))
        torch.save(optim_state, os.path.join(ckpt_dir, "optimizer.pt"))
        torch.save(sched_state, os.path.join(ckpt_dir, "scheduler.pt"))
        state.save_to_json(os.path.join(ckpt_dir, "trainer_state.json"))
        return ckpt_dir

    def _wait(self):
        if self._pending is not None:
            done = self._pending.result()
            logger.info("Async checkpoint %s finished", done)
            self._pending = None

    def on_step_end(self, args, state, control, trainer=None, **kwargs):
        if not control.should_save:
            return
        control.should_save = False
        if not self.is_main:
            return
        self._wait()
        ckpt_dir = os.path.join(trainer.checkpoint_dir, f"checkpoint-{state.global_step}")
        logger.info("Saving model checkpoint to %s (async)", ckpt_dir)
        model_state = {k: v.detach().to("cpu", copy=True) for k, v in trainer.unwrapped_model.state_dict().items()}
        optim_state = trainer.optimizer.state_dict()
        sched_state = trainer.scheduler.state_dict()
        snapshot = type(state)(**{k: getattr(state, k) for k in state.__dataclass_fields__})
        self._pending = self._executor.submit(self._write, ckpt_dir, model_state, optim_state, sched_state, snapshot)

    def on_train_end(self, args, state, control, **kwargs):
        if self.is_main:
            self._wait()
        self._executor.shutdown(wait=True)


class EmergencyCheckpointCallback(TrainerCallback):
    """On a crash, synchronise all ranks and write the current weights."""

    def on_exception(self, args, state, control, exc=None, trainer=None, **kwargs):
        logger.error(
            "Training interrupted at step %d by %s; writing emergency checkpoint",
            state.global_step,
            type(exc).__name__,
            exc_info=exc,
        )
        if dist.is_initialized():
            dist.barrier()
        path = os.path.join(trainer.checkpoint_dir, f"emergency-{state.global_step}")
        trainer.save_stage_weights(path)
        logger.error("Emergency checkpoint written to %s", path)
