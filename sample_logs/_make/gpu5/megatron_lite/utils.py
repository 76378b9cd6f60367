"""Small helpers: rank-aware printing, timers, a progress heartbeat."""

import faulthandler
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime

import torch
import torch.distributed as dist


def get_rank():
    return dist.get_rank() if dist.is_initialized() else int(os.getenv("RANK", "0"))


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else int(os.getenv("WORLD_SIZE", "1"))


def is_last_rank():
    return get_rank() == get_world_size() - 1


def print_rank_0(message):
    if get_rank() == 0:
        print(message, flush=True)


def print_rank_last(message):
    if is_last_rank():
        print(message, flush=True)


def print_datetime(string):
    """Note that this call will sync across all ranks."""
    with Heartbeat.paused():
        dist.barrier()
    time_str = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print_rank_0("[" + string + "] datetime: {} ".format(time_str))


class _Tee:
    def __init__(self, stream, path):
        self._stream = stream
        self._file = open(path, "a", buffering=1)

    def write(self, data):
        self._stream.write(data)
        self._file.write(data)
        return len(data)

    def flush(self):
        self._stream.flush()
        self._file.flush()

    def fileno(self):
        return self._stream.fileno()

    def isatty(self):
        return False

    def __getattr__(self, name):
        return getattr(self._stream, name)


def setup_rank_logfile(log_dir, rank):
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, "rank{}.log".format(rank))
    sys.stdout = _Tee(sys.stdout, path)
    sys.stderr = _Tee(sys.stderr, path)


class _Timer:
    def __init__(self, name, device):
        self.name = name
        self.device = device
        self.elapsed_ = 0.0
        self.started_ = False
        self.start_time = time.time()

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self, barrier=False):
        assert not self.started_, "timer {} has already been started".format(self.name)
        if barrier:
            dist.barrier()
        self._sync()
        self.start_time = time.time()
        self.started_ = True

    def stop(self, barrier=False):
        assert self.started_, "timer {} is not started".format(self.name)
        if barrier:
            dist.barrier()
        self._sync()
        self.elapsed_ += time.time() - self.start_time
        self.started_ = False

    def elapsed(self, reset=True):
        started = self.started_
        if started:
            self.stop()
        e = self.elapsed_
        if reset:
            self.elapsed_ = 0.0
        if started:
            self.start()
        return e


class Timers:
    def __init__(self, device):
        self.device = device
        self.timers = {}

    def __call__(self, name):
        if name not in self.timers:
            self.timers[name] = _Timer(name, self.device)
        return self.timers[name]

    def log(self, names, normalizer=1.0, reset=True, barrier=False):
        """Gather (min, max) across ranks and print on the last rank."""
        if barrier:
            dist.barrier()
        world = get_world_size()
        local = torch.tensor([self.timers[n].elapsed(reset=reset) * 1000.0 / normalizer
                              if n in self.timers else 0.0 for n in names],
                             dtype=torch.float, device=self.device)
        gathered = torch.zeros(world * len(names), dtype=torch.float, device=self.device)
        dist.all_gather_into_tensor(gathered, local)
        gathered = gathered.view(world, len(names))
        out = "(min, max) time across ranks (ms):"
        for i, n in enumerate(names):
            mn = gathered[:, i].min().item()
            mx = gathered[:, i].max().item()
            out += "\n    {}: ({:.2f}, {:.2f})".format((n + " ").ljust(48, "."), mn, mx)
        print_rank_last(out)


class Heartbeat:
    """Kills the process when the training loop stops making progress.

    A rank that is stuck outside of a collective (I/O, a lock, a dead
    loader) is never caught by the NCCL watchdog, so every rank runs this
    thread and takes itself down after `timeout` seconds without a beat.
    Waiting inside a barrier is left to the process-group timeout.
    """

    _instance = None

    def __init__(self, timeout, rank):
        self.timeout = timeout
        self.rank = rank
        self.last = time.monotonic()
        self.stage = "startup"
        self._paused = 0
        self._thread = None
        Heartbeat._instance = self

    @classmethod
    @contextmanager
    def paused(cls):
        hb = cls._instance
        if hb is None:
            yield
            return
        hb._paused += 1
        try:
            yield
        finally:
            hb._paused -= 1
            hb.last = time.monotonic()

    def beat(self, stage=None):
        self.last = time.monotonic()
        if stage is not None:
            self.stage = stage

    def start(self):
        if not self.timeout:
            return
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            time.sleep(1.0)
            idle = time.monotonic() - self.last
            if self._paused:
                continue
            if self.timeout and idle > self.timeout:
                sys.stderr.write(
                    "[heartbeat] rank {}: no progress for {:.0f} s (timeout {} s, last stage: {}); "
                    "dumping stacks and terminating\n".format(self.rank, idle, self.timeout,
                                                            self.stage))
                sys.stderr.flush()
                faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
                sys.__stderr__.flush()
                os.kill(os.getpid(), signal.SIGKILL)
