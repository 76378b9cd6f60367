"""torchtitan-like FSDP2 layout: meta-device init, fully_shard per block, to_empty."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

try:  # torch >= 2.6
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch 2.4 / 2.5
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

from . import parallel_state as ps
from .model import GPTModel
from .utils import print_rank_0


def build_fsdp2_model(args, config, device):
    world_size = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world_size,), mesh_dim_names=("dp_shard",))
    ps.set_device_mesh(mesh)
    print_rank_0("> building {} device mesh with shape {} and dims {}".format(
        device.type, (world_size,), ("dp_shard",)))

    config.perform_initialization = False
    with torch.device("meta"):
        model = GPTModel(config)

    fsdp_kwargs = {"mesh": mesh}
    if args.bf16:
        fsdp_kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                        reduce_dtype=torch.float32)
    for layer_id, block in enumerate(model.decoder.layers):
        reshard = layer_id < len(model.decoder.layers) - 1
        fully_shard(block, reshard_after_forward=reshard, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    print_rank_0("> applied FSDP2 (fully_shard) to {} transformer blocks and the root module".format(
        len(model.decoder.layers)))

    model.to_empty(device=device)
    model.init_weights()
    return model
