"""Checkpoint save/load.

Two formats:
  * ``torch``       : one file per tensor-parallel rank written by data-parallel rank 0
                      (iter_XXXXXXX/mp_rank_YY/model_optim_rng.pt), optionally written by a
                      background thread (--async-save).
  * ``torch_dist``  : torch.distributed.checkpoint (sharded, required for FSDP2).
"""
from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

import parallel as mpu

logger = logging.getLogger("lm.ckpt")

TRACKER = "latest_checkpointed_iteration.txt"


def _iter_dir(root, iteration):
    return os.path.join(root, "iter_{:07d}".format(iteration))


def _rng_state():
    state = {"random": random.getstate(), "np": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _to_cpu(obj):
    if torch.is_tensor(obj):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def unwrap(model):
    return model.module if hasattr(model, "module") else model


class AsyncCheckpointWriter:
    """Writes checkpoint files from a background thread so training can continue."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ckpt-writer", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            state, path, tracker_root, iteration = item
            t0 = time.time()
            tmp = path + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, path)
            if tracker_root is not None:
                with open(os.path.join(tracker_root, TRACKER), "w") as f:
                    f.write(str(iteration))
            logger.info("async checkpoint write of iteration %d finished in %.2fs", iteration, time.time() - t0)
            self._queue.task_done()

    def submit(self, state, path, tracker_root, iteration):
        self._queue.put((state, path, tracker_root, iteration))

    def finalize(self):
        self._queue.join()


_ASYNC_WRITER = None


def save_checkpoint(args, iteration, model, optimizer, scheduler, ema=None):
    global _ASYNC_WRITER
    t0 = time.time()
    root = args.save
    logger.info("saving checkpoint at iteration %7d to %s in %s format", iteration, root, args.ckpt_format)
    if args.ckpt_format == "torch_dist":
        _save_dcp(args, iteration, model, optimizer, scheduler)
        return
    path_dir = os.path.join(_iter_dir(root, iteration), "mp_rank_{:02d}".format(mpu.get_tensor_model_parallel_rank()))
    if mpu.get_data_parallel_rank() == 0:
        os.makedirs(path_dir, exist_ok=True)
        state = {
            "args": args,
            "iteration": iteration,
            "model": unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "opt_param_scheduler": scheduler.state_dict(),
            "rng_state": _rng_state(),
        }
        if ema is not None:
            state["ema"] = ema.state_dict()
        path = os.path.join(path_dir, "model_optim_rng.pt")
        is_tracker_writer = dist.get_rank() == 0
        if args.async_save:
            if _ASYNC_WRITER is None:
                _ASYNC_WRITER = AsyncCheckpointWriter()
            _ASYNC_WRITER.submit(_to_cpu(state), path, root if is_tracker_writer else None, iteration)
            logger.info("scheduled async checkpoint write for iteration %d (snapshot took %.2fs)", iteration,
                        time.time() - t0)
            return
        torch.save(state, path)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(os.path.join(root, TRACKER), "w") as f:
            f.write(str(iteration))
    logger.info("  successfully saved checkpoint at iteration %7d to %s (%.2fs)", iteration, root, time.time() - t0)


def _save_dcp(args, iteration, model, optimizer, scheduler):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    t0 = time.time()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    ckpt_dir = _iter_dir(args.save, iteration)
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=ckpt_dir)
    if dist.get_rank() == 0:
        torch.save({"iteration": iteration, "opt_param_scheduler": scheduler.state_dict(),
                    "args": vars(args).copy()}, os.path.join(ckpt_dir, "trainer_state.pt"))
        with open(os.path.join(args.save, TRACKER), "w") as f:
            f.write(str(iteration))
    dist.barrier()
    logger.info("  successfully saved distributed checkpoint at iteration %7d to %s (%.2fs)", iteration,
                ckpt_dir, time.time() - t0)


def finalize_async_saves():
    if _ASYNC_WRITER is not None:
        _ASYNC_WRITER.finalize()


def read_tracker(root):
    path = os.path.join(root, TRACKER)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return int(f.read().strip())


def load_checkpoint(args, model, optimizer, scheduler, ema=None):
    """Returns the iteration to resume from (0 if nothing was loaded)."""
    root = args.load
    iteration = read_tracker(root)
    if iteration is None:
        logger.warning("could not find the metadata file %s; will not load any checkpoints and will start "
                       "from random", os.path.join(root, TRACKER))
        return 0
    t0 = time.time()
    logger.info("loading checkpoint from %s at iteration %d (format %s)", root, iteration, args.ckpt_format)
    if args.ckpt_format == "torch_dist":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        ckpt_dir = _iter_dir(root, iteration)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optimizer": optim_sd}
        dcp.load(state, checkpoint_id=ckpt_dir)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        trainer_state = torch.load(os.path.join(ckpt_dir, "trainer_state.pt"), weights_only=False)
        scheduler.load_state_dict(trainer_state["opt_param_scheduler"])
    else:
        path = os.path.join(_iter_dir(root, iteration), "mp_rank_{:02d}".format(mpu.get_tensor_model_parallel_rank()),
                            "model_optim_rng.pt")
        state = torch.load(path, map_location="cpu", weights_only=False)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["opt_param_scheduler"])
        if ema is not None and "ema" in state:
            ema.load_state_dict(state["ema"])
    dist.barrier()
    logger.info("  successfully loaded checkpoint from %s at iteration %d (%.2fs)", root, iteration, time.time() - t0)
    return iteration
