"""Process groups for tensor / data parallelism."""

from datetime import timedelta

import torch.distributed as dist

_TENSOR_MODEL_PARALLEL_GROUP = None
_TENSOR_MODEL_PARALLEL_RANKS = None
_DATA_PARALLEL_GROUP = None
_DATA_PARALLEL_RANKS = None
_WORLD_GROUP_GLOO = None
_DEVICE_MESH = None


def initialize_model_parallel(tensor_model_parallel_size=1, timeout_minutes=10):
    global _TENSOR_MODEL_PARALLEL_GROUP, _TENSOR_MODEL_PARALLEL_RANKS
    global _DATA_PARALLEL_GROUP, _DATA_PARALLEL_RANKS, _WORLD_GROUP_GLOO
    assert dist.is_initialized()
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    tp = tensor_model_parallel_size
    dp = world_size // tp
    timeout = timedelta(minutes=timeout_minutes)

    for i in range(dp):
        ranks = list(range(i * tp, (i + 1) * tp))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            _TENSOR_MODEL_PARALLEL_GROUP = group
            _TENSOR_MODEL_PARALLEL_RANKS = ranks

    for j in range(tp):
        ranks = list(range(j, world_size, tp))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            _DATA_PARALLEL_GROUP = group
            _DATA_PARALLEL_RANKS = ranks

    # CPU group for object collectives (node map, checkpoint metadata).
    _WORLD_GROUP_GLOO = dist.new_group(backend="gloo", timeout=timeout)


def set_device_mesh(mesh):
    global _DEVICE_MESH
    _DEVICE_MESH = mesh


def get_device_mesh():
    return _DEVICE_MESH


def get_tensor_model_parallel_group():
    return _TENSOR_MODEL_PARALLEL_GROUP


def get_tensor_model_parallel_world_size():
    return len(_TENSOR_MODEL_PARALLEL_RANKS)


def get_tensor_model_parallel_rank():
    return _TENSOR_MODEL_PARALLEL_RANKS.index(dist.get_rank())


def get_tensor_model_parallel_src_rank():
    return _TENSOR_MODEL_PARALLEL_RANKS[0]


def get_data_parallel_group():
    return _DATA_PARALLEL_GROUP


def get_data_parallel_world_size():
    return len(_DATA_PARALLEL_RANKS)


def get_data_parallel_rank():
    return _DATA_PARALLEL_RANKS.index(dist.get_rank())


def get_data_parallel_src_rank():
    return _DATA_PARALLEL_RANKS[0]


def get_world_group_gloo():
    return _WORLD_GROUP_GLOO
