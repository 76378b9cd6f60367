"""Model-parallel state and hand-written tensor-parallel layers.

Loosely follows the layout of Megatron-LM's ``mpu`` package: process groups
for tensor parallel (TP) and data parallel (DP) communication, autograd
functions that move activations between TP regions, and column/row parallel
linear layers plus a vocab-parallel embedding.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

_TENSOR_MODEL_PARALLEL_GROUP = None
_DATA_PARALLEL_GROUP = None
_TENSOR_MODEL_PARALLEL_WORLD_SIZE = 1
_TENSOR_MODEL_PARALLEL_RANK = 0
_DATA_PARALLEL_WORLD_SIZE = 1
_DATA_PARALLEL_RANK = 0


def ensure_divisibility(numerator, denominator):
    """Ensure that numerator is divisible by the denominator."""
    assert numerator % denominator == 0, "{} is not divisible by {}".format(numerator, denominator)


def divide(numerator, denominator):
    ensure_divisibility(numerator, denominator)
    return numerator // denominator


def initialize_model_parallel(tensor_model_parallel_size: int = 1, timeout=None):
    """Build TP and DP groups. Ranks [0..tp) form the first TP group, and so on."""
    global _TENSOR_MODEL_PARALLEL_GROUP, _DATA_PARALLEL_GROUP
    global _TENSOR_MODEL_PARALLEL_WORLD_SIZE, _TENSOR_MODEL_PARALLEL_RANK
    global _DATA_PARALLEL_WORLD_SIZE, _DATA_PARALLEL_RANK

    world_size = dist.get_world_size()
    rank = dist.get_rank()
    tp = min(tensor_model_parallel_size, world_size)
    ensure_divisibility(world_size, tp)
    dp = world_size // tp

    for i in range(dp):
        ranks = list(range(i * tp, (i + 1) * tp))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            _TENSOR_MODEL_PARALLEL_GROUP = group
    for j in range(tp):
        ranks = list(range(j, world_size, tp))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            _DATA_PARALLEL_GROUP = group

    _TENSOR_MODEL_PARALLEL_WORLD_SIZE = tp
    _TENSOR_MODEL_PARALLEL_RANK = rank % tp
    _DATA_PARALLEL_WORLD_SIZE = dp
    _DATA_PARALLEL_RANK = rank // tp


def get_tensor_model_parallel_group():
    return _TENSOR_MODEL_PARALLEL_GROUP


def get_data_parallel_group():
    return _DATA_PARALLEL_GROUP


def get_tensor_model_parallel_world_size():
    return _TENSOR_MODEL_PARALLEL_WORLD_SIZE


def get_tensor_model_parallel_rank():
    return _TENSOR_MODEL_PARALLEL_RANK


def get_data_parallel_world_size():
    return _DATA_PARALLEL_WORLD_SIZE


def get_data_parallel_rank():
    return _DATA_PARALLEL_RANK


# --------------------------------------------------------------------------
# communication primitives with autograd support
# --------------------------------------------------------------------------
def _reduce(input_):
    if get_tensor_model_parallel_world_size() == 1:
        return input_
    dist.all_reduce(input_, group=get_tensor_model_parallel_group())
    return input_


def _split_along_last_dim(input_):
    world_size = get_tensor_model_parallel_world_size()
    if world_size == 1:
        return input_
    last_dim_size = divide(input_.size(-1), world_size)
    chunks = torch.split(input_, last_dim_size, dim=-1)
    return chunks[get_tensor_model_parallel_rank()].contiguous()


def _gather_along_last_dim(input_):
    world_size = get_tensor_model_parallel_world_size()
    if world_size == 1:
        return input_
    tensor_list = [torch.empty_like(input_) for _ in range(world_size)]
    tensor_list[get_tensor_model_parallel_rank()] = input_
    dist.all_gather(tensor_list, input_.contiguous(), group=get_tensor_model_parallel_group())
    return torch.cat(tensor_list, dim=-1).contiguous()


class _CopyToModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return input_

    @staticmethod
    def backward(ctx, grad_output):
        return _reduce(grad_output.contiguous())


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return _reduce(input_.contiguous())

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class _GatherFromModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return _gather_along_last_dim(input_)

    @staticmethod
    def backward(ctx, grad_output):
        return _split_along_last_dim(grad_output)


def copy_to_tensor_model_parallel_region(input_):
    return _CopyToModelParallelRegion.apply(input_)


def reduce_from_tensor_model_parallel_region(input_):
    return _ReduceFromModelParallelRegion.apply(input_)


def gather_from_tensor_model_parallel_region(input_):
    return _GatherFromModelParallelRegion.apply(input_)


# --------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------
def _init_weight(weight, std):
    nn.init.normal_(weight, mean=0.0, std=std)


class VocabParallelEmbedding(nn.Module):
    """Embedding parallelised in the vocabulary dimension."""

    def __init__(self, num_embeddings, embedding_dim, init_std=0.02):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        tp = get_tensor_model_parallel_world_size()
        self.num_embeddings_per_partition = divide(num_embeddings, tp)
        self.vocab_start_index = get_tensor_model_parallel_rank() * self.num_embeddings_per_partition
        self.vocab_end_index = self.vocab_start_index + self.num_embeddings_per_partition
        self.weight = nn.Parameter(torch.empty(self.num_embeddings_per_partition, embedding_dim))
        _init_weight(self.weight, init_std)

    def forward(self, input_):
        if get_tensor_model_parallel_world_size() > 1:
            input_mask = (input_ < self.vocab_start_index) | (input_ >= self.vocab_end_index)
            masked_input = input_.clone() - self.vocab_start_index
            masked_input[input_mask] = 0
        else:
            masked_input = input_
        output_parallel = F.embedding(masked_input, self.weight)
        if get_tensor_model_parallel_world_size() > 1:
            output_parallel[input_mask, :] = 0.0
        return reduce_from_tensor_model_parallel_region(output_parallel)


class ColumnParallelLinear(nn.Module):
    """Y = XA + b with A split along its second (output) dimension."""

    def __init__(self, input_size, output_size, bias=True, gather_output=False, init_std=0.02):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        self.input_size = input_size
        self.output_size = output_size
        self.output_size_per_partition = divide(output_size, tp)
        self.gather_output = gather_output
        self.weight = nn.Parameter(torch.empty(self.output_size_per_partition, input_size))
        _init_weight(self.weight, init_std)
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.output_size_per_partition))
        else:
            self.register_parameter("bias", None)

    def forward(self, input_):
        input_parallel = copy_to_tensor_model_parallel_region(input_)
        output_parallel = F.linear(input_parallel, self.weight, self.bias)
        if self.gather_output:
            return gather_from_tensor_model_parallel_region(output_parallel)
        return output_parallel


class RowParallelLinear(nn.Module):
    """Y = XA + b with A split along its first (input) dimension."""

    def __init__(self, input_size, output_size, bias=True, init_std=0.02):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        self.input_size = input_size
        self.output_size = output_size
        self.input_size_per_partition = divide(input_size, tp)
        self.weight = nn.Parameter(torch.empty(output_size, self.input_size_per_partition))
        _init_weight(self.weight, init_std)
        if bias:
            self.bias = nn.Parameter(torch.zeros(output_size))
        else:
            self.register_parameter("bias", None)

    def forward(self, input_parallel):
        output_parallel = F.linear(input_parallel, self.weight)
        output = reduce_from_tensor_model_parallel_region(output_parallel)
        if self.bias is not None:
            output = output + self.bias
        return output


def scaled_init_std(base_std, num_layers):
    return base_std / math.sqrt(2.0 * num_layers)
