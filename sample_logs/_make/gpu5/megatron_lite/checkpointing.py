"""Megatron-style checkpoints: <dir>/iter_0000010/mp_rank_0N/model_optim_rng.pt."""

import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist

from . import parallel_state as ps
from .utils import print_rank_0

CHECKPOINT_VERSION = 3.0


def get_checkpoint_tracker_filename(checkpoints_path):
    return os.path.join(checkpoints_path, "latest_checkpointed_iteration.txt")


def get_checkpoint_name(checkpoints_path, iteration, tp_rank=None):
    if tp_rank is None:
        tp_rank = ps.get_tensor_model_parallel_rank()
    directory = "iter_{:07d}".format(iteration)
    return os.path.join(checkpoints_path, directory, "mp_rank_{:02d}".format(tp_rank),
                        "model_optim_rng.pt")


def read_metadata(tracker_filename):
    iteration = 0
    release = False
    with open(tracker_filename, "r") as f:
        metastring = f.read().strip()
        try:
            iteration = int(metastring)
        except ValueError:
            release = metastring == "release"
            if not release:
                print_rank_0("ERROR: Invalid metadata file {}. Exiting".format(tracker_filename))
                sys.exit()
    assert iteration > 0 or release, "error parsing metadata file {}".format(tracker_filename)
    return iteration, release


def _get_rng_state():
    state = {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng_state"] = torch.cuda.get_rng_state()
    return state


def _serializable_args(args):
    out = {}
    for k, v in vars(args).items():
        if isinstance(v, (int, float, str, bool, type(None))):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = list(v)
        else:
            out[k] = str(v)
    return out


def save_checkpoint(iteration, model, optimizer, opt_param_scheduler, args):
    if args.parallel_layout == "fsdp2":
        print_rank_0("WARNING: checkpointing is not implemented for the fsdp2 layout, skipping")
        return
    print_rank_0("saving checkpoint at iteration {:7d} to {}".format(iteration, args.save))
    if ps.get_data_parallel_rank() == 0:
        checkpoint_name = get_checkpoint_name(args.save, iteration)
        os.makedirs(os.path.dirname(checkpoint_name), exist_ok=True)
        state_dict = {
            "args": _serializable_args(args),
            "checkpoint_version": CHECKPOINT_VERSION,
            "iteration": iteration,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "opt_param_scheduler": opt_param_scheduler.state_dict(),
            "rng_state": [_get_rng_state()],
        }
        torch.save(state_dict, checkpoint_name)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(get_checkpoint_tracker_filename(args.save), "w") as f:
            f.write(str(iteration))
    print_rank_0("  successfully saved checkpoint from iteration {:7d} to {} "
                 "[ t {}/{}, p 1/1 ]".format(iteration, args.save,
                                             ps.get_tensor_model_parallel_rank() + 1,
                                             ps.get_tensor_model_parallel_world_size()))
    dist.barrier()


def load_checkpoint(model, optimizer, opt_param_scheduler, args):
    """Returns the iteration to resume from (0 when nothing was loaded)."""
    load_dir = args.load
    tracker_filename = get_checkpoint_tracker_filename(load_dir)
    if not os.path.isfile(tracker_filename):
        print_rank_0("WARNING: could not find the metadata file {} ".format(tracker_filename))
        print_rank_0("    will not load any checkpoints and will start from random")
        return 0
    iteration, release = read_metadata(tracker_filename)
    checkpoint_name = get_checkpoint_name(load_dir, iteration)
    print_rank_0(" loading checkpoint from {} at iteration {}".format(load_dir, iteration))
    kwargs = {"map_location": "cpu"}
    if "weights_only" in torch.load.__code__.co_varnames:
        kwargs["weights_only"] = False
    state_dict = torch.load(checkpoint_name, **kwargs)
    ckpt_args = state_dict.get("args", {})
    for key in ("num_layers", "hidden_size", "num_attention_heads"):
        if key in ckpt_args and ckpt_args[key] != getattr(args, key):
            print_rank_0("WARNING: checkpoint {} = {} differs from current {} = {}".format(
                key, ckpt_args[key], key, getattr(args, key)))
    model.load_state_dict(state_dict["model"], strict=True)
    if not args.no_load_optim and "optimizer" in state_dict:
        optimizer.load_state_dict(state_dict["optimizer"])
        opt_param_scheduler.load_state_dict(state_dict["opt_param_scheduler"])
    if not args.no_load_rng and "rng_state" in state_dict:
        rng = state_dict["rng_state"][0]
        random.setstate(rng["random_rng_state"])
        np.random.set_state(rng["np_rng_state"])
        torch.set_rng_state(rng["torch_rng_state"])
        if "cuda_rng_state" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda_rng_state"])
    dist.barrier()
    print_rank_0("  successfully loaded checkpoint from {} [ t {}/{}, p 1/1 ] at iteration {}".format(
        load_dir, ps.get_tensor_model_parallel_rank() + 1,
        ps.get_tensor_model_parallel_world_size(), iteration))
    return iteration
