"""State, control flags and the callback machinery of the trainer."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field

import numpy as np
import torch


@dataclass
class TrainerState:
    global_step: int = 0
    max_steps: int = 0
    epoch: float = 0.0
    total_flos: float = 0.0
    best_metric: float | None = None
    log_history: list = field(default_factory=list)
    last_local_loss: float | None = None

    def save_to_json(self, path):
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=2, sort_keys=True)

    @classmethod
    def load_from_json(cls, path):
        with open(path) as f:
            return cls(**json.load(f))


@dataclass
class TrainerControl:
    should_training_stop: bool = False
    should_log: bool = False
    should_evaluate: bool = False
    should_save: bool = False

    def reset_step(self):
        self.should_log = self.should_evaluate = self.should_save = False


class TrainerCallback:
    def on_init_end(self, args, state, control, **kwargs):
        pass

    def on_train_begin(self, args, state, control, **kwargs):
        pass

    def on_step_begin(self, args, state, control, **kwargs):
        pass

    def on_step_end(self, args, state, control, **kwargs):
        pass

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        pass

    def on_save(self, args, state, control, **kwargs):
        pass

    def on_train_end(self, args, state, control, **kwargs):
        pass

    def on_exception(self, args, state, control, exc=None, **kwargs):
        pass


class CallbackHandler:
    def __init__(self, callbacks, trainer):
        self.callbacks = list(callbacks)
        self.trainer = trainer

    def add(self, cb):
        self.callbacks.append(cb)

    def _call(self, event, args, state, control, **kwargs):
        for cb in self.callbacks:
            getattr(cb, event)(args, state, control, trainer=self.trainer, **kwargs)
        return control

    def on_init_end(self, args, state, control):
        return self._call("on_init_end", args, state, control)

    def on_train_begin(self, args, state, control):
        return self._call("on_train_begin", args, state, control)

    def on_step_begin(self, args, state, control):
        return self._call("on_step_begin", args, state, control)

    def on_step_end(self, args, state, control):
        return self._call("on_step_end", args, state, control)

    def on_log(self, args, state, control, logs):
        return self._call("on_log", args, state, control, logs=logs)

    def on_evaluate(self, args, state, control, metrics):
        return self._call("on_evaluate", args, state, control, metrics=metrics)

    def on_save(self, args, state, control):
        return self._call("on_save", args, state, control)

    def on_train_end(self, args, state, control):
        return self._call("on_train_end", args, state, control)

    def on_exception(self, args, state, control, exc):
        return self._call("on_exception", args, state, control, exc=exc)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def rng_state():
    states = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.random.get_rng_state_all()
    return states


def restore_rng_state(states):
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.random.set_rng_state(states["cpu"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.random.set_rng_state_all(states["cuda"])


def format_time(seconds):
    seconds = int(max(seconds, 0))
    m, s = divmod(seconds, 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
