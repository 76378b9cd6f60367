"""Hand-written tensor parallelism (in the spirit of megatron.core.tensor_parallel)."""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parameter import Parameter

from . import parallel_state as ps

_MODEL_PARALLEL_GENERATOR = None
_USERBUFFERS = {}


def divide(numerator, denominator):
    assert numerator % denominator == 0, "{} is not divisible by {}".format(numerator, denominator)
    return numerator // denominator


def model_parallel_seed(seed, device):
    """Partitioned weights use a per-TP-rank generator, replicated ones the default one."""
    global _MODEL_PARALLEL_GENERATOR
    torch.manual_seed(seed)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed + 2718 + ps.get_tensor_model_parallel_rank())
    _MODEL_PARALLEL_GENERATOR = gen


def _init_partitioned(weight, std):
    with torch.no_grad():
        weight.normal_(0.0, std, generator=_MODEL_PARALLEL_GENERATOR)


def set_tensor_model_parallel_attributes(tensor, is_parallel, dim):
    setattr(tensor, "tensor_model_parallel", is_parallel)
    setattr(tensor, "partition_dim", dim)


def param_is_not_tensor_parallel_duplicate(param):
    return getattr(param, "tensor_model_parallel", False) or \
        ps.get_tensor_model_parallel_rank() == 0


# --------------------------------------------------------------------------- mappings

def _reduce(input_):
    if ps.get_tensor_model_parallel_world_size() == 1:
        return input_
    input_ = input_.contiguous()
    dist.all_reduce(input_, group=ps.get_tensor_model_parallel_group())
    return input_


def _split_along_last_dim(input_):
    world_size = ps.get_tensor_model_parallel_world_size()
    if world_size == 1:
        return input_
    last_dim_size = divide(input_.size(-1), world_size)
    chunks = torch.split(input_, last_dim_size, dim=-1)
    return chunks[ps.get_tensor_model_parallel_rank()].contiguous()


def _gather_along_last_dim(input_):
    world_size = ps.get_tensor_model_parallel_world_size()
    if world_size == 1:
        return input_
    input_ = input_.contiguous()
    dim_size = list(input_.size())
    dim_size[0] = dim_size[0] * world_size
    output = torch.empty(dim_size, dtype=input_.dtype, device=input_.device)
    dist.all_gather_into_tensor(output, input_, group=ps.get_tensor_model_parallel_group())
    # [world * s, ...] -> [s, ..., world * h]
    chunks = output.chunk(world_size, dim=0)
    return torch.cat(chunks, dim=-1).contiguous()


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
        return _reduce(input_)

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


class _ScatterToModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return _split_along_last_dim(input_)

    @staticmethod
    def backward(ctx, grad_output):
        return _gather_along_last_dim(grad_output)


def copy_to_tensor_model_parallel_region(input_):
    return _CopyToModelParallelRegion.apply(input_)


def reduce_from_tensor_model_parallel_region(input_):
    return _ReduceFromModelParallelRegion.apply(input_)


def gather_from_tensor_model_parallel_region(input_):
    return _GatherFromModelParallelRegion.apply(input_)


def scatter_to_tensor_model_parallel_region(input_):
    return _ScatterToModelParallelRegion.apply(input_)


# ------------------------------------------------------------ persistent comm buffers

def _tensor_from_address(address, numel, dtype, device):
    """Zero-copy tensor over `numel` elements starting at a raw device address."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    storage = torch._C._construct_storage_from_data_pointer(address, device, numel * itemsize)
    out = torch.empty(0, dtype=dtype, device=device)
    out.set_(storage, 0, (numel,), (1,))
    return out


def get_userbuffer(name, like):
    """One slot per TP rank, laid out back to back: [tp_size, *like.shape]."""
    tp = ps.get_tensor_model_parallel_world_size()
    key = (name, like.dtype, tuple(like.shape))
    if key not in _USERBUFFERS:
        _USERBUFFERS[key] = torch.empty((tp,) + tuple(like.shape), dtype=like.dtype,
                                        device=like.device)
    return _USERBUFFERS[key]


def userbuffer_slot(ub, slot, like):
    """View of `slot` inside the persistent buffer without going through the allocator."""
    row_bytes = like.stride(0) * like.element_size()
    offset = slot * row_bytes * like.numel()
    view = _tensor_from_address(ub.data_ptr() + offset, like.numel(), like.dtype, like.device)
    return view.view(like.shape)


# --------------------------------------------------------------------------- layers

def vocab_range_from_global_vocab_size(global_vocab_size, rank, world_size):
    per_partition = global_vocab_size // world_size
    index_f = rank * per_partition
    # the last partition also takes the remainder
    index_l = global_vocab_size if rank == world_size - 1 else index_f + per_partition
    return index_f, index_l


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, num_embeddings, embedding_dim, *, config):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.tp_size = ps.get_tensor_model_parallel_world_size()
        self.vocab_start_index, self.vocab_end_index = vocab_range_from_global_vocab_size(
            num_embeddings, ps.get_tensor_model_parallel_rank(), self.tp_size)
        self.num_embeddings_per_partition = num_embeddings // self.tp_size
        self.weight = Parameter(torch.empty(self.num_embeddings_per_partition, embedding_dim,
                                            dtype=config.params_dtype))
        set_tensor_model_parallel_attributes(self.weight, True, 0)
        if config.perform_initialization:
            _init_partitioned(self.weight, config.init_method_std)

    def forward(self, input_):
        if self.tp_size > 1:
            input_mask = (input_ < self.vocab_start_index) | (input_ >= self.vocab_end_index)
            masked_input = input_.clone() - self.vocab_start_index
            masked_input[input_mask] = 0
        else:
            masked_input = input_
        output_parallel = F.embedding(masked_input, self.weight)
        if self.tp_size > 1:
            output_parallel[input_mask, :] = 0.0
        return reduce_from_tensor_model_parallel_region(output_parallel)


class ColumnParallelLinear(torch.nn.Module):
    """Y = XA + b with A split along its second dimension."""

    def __init__(self, input_size, output_size, *, config, bias=True, gather_output=False,
                 init_std=None):
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.gather_output = gather_output
        world_size = ps.get_tensor_model_parallel_world_size()
        self.output_size_per_partition = divide(output_size, world_size)
        self.weight = Parameter(torch.empty(self.output_size_per_partition, input_size,
                                            dtype=config.params_dtype))
        set_tensor_model_parallel_attributes(self.weight, True, 0)
        if config.perform_initialization:
            _init_partitioned(self.weight, init_std or config.init_method_std)
        if bias:
            self.bias = Parameter(torch.zeros(self.output_size_per_partition,
                                              dtype=config.params_dtype))
            set_tensor_model_parallel_attributes(self.bias, True, 0)
        else:
            self.register_parameter("bias", None)

    def forward(self, input_):
        input_parallel = copy_to_tensor_model_parallel_region(input_)
        output_parallel = F.linear(input_parallel, self.weight, self.bias)
        if self.gather_output:
            return gather_from_tensor_model_parallel_region(output_parallel)
        return output_parallel


class RowParallelLinear(torch.nn.Module):
    """Y = XA + b with A split along its first dimension and X along its last."""

    def __init__(self, input_size, output_size, *, config, bias=True, init_std=None, name=""):
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.name = name
        self.tp_comm_overlap = config.tp_comm_overlap
        world_size = ps.get_tensor_model_parallel_world_size()
        self.input_size_per_partition = divide(input_size, world_size)
        self.weight = Parameter(torch.empty(output_size, self.input_size_per_partition,
                                            dtype=config.params_dtype))
        set_tensor_model_parallel_attributes(self.weight, True, 1)
        if config.perform_initialization:
            _init_partitioned(self.weight, init_std or config.init_method_std)
        if bias:
            self.bias = Parameter(torch.zeros(output_size, dtype=config.params_dtype))
            set_tensor_model_parallel_attributes(self.bias, False, -1)
        else:
            self.register_parameter("bias", None)

    def forward(self, input_):
        output_parallel = F.linear(input_, self.weight)
        output_ = reduce_from_tensor_model_parallel_region(output_parallel)
        if self.tp_comm_overlap and ps.get_tensor_model_parallel_world_size() > 1:
            ub = get_userbuffer(self.name, output_)
            slot = userbuffer_slot(ub, ps.get_tensor_model_parallel_rank(), output_)
            slot.copy_(output_)
            output_ = slot
        if self.bias is not None:
            output_ = output_ + self.bias
        return output_


# ---------------------------------------------------------------- cross entropy

class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vocab_parallel_logits, target):
        group = ps.get_tensor_model_parallel_group()
        world_size = ps.get_tensor_model_parallel_world_size()
        logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
        if world_size > 1:
            dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
        vocab_parallel_logits = vocab_parallel_logits - logits_max.unsqueeze(dim=-1)

        partition_vocab_size = vocab_parallel_logits.size()[-1]
        vocab_start_index, vocab_end_index = vocab_range_from_global_vocab_size(
            partition_vocab_size * world_size, ps.get_tensor_model_parallel_rank(), world_size)
        target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = target.clone() - vocab_start_index
        masked_target[target_mask] = 0

        logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_logits_1d = predicted_logits_1d.clone().contiguous()
        predicted_logits = predicted_logits_1d.view_as(target)
        predicted_logits[target_mask] = 0.0
        if world_size > 1:
            dist.all_reduce(predicted_logits, group=group)

        exp_logits = torch.exp(vocab_parallel_logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        if world_size > 1:
            dist.all_reduce(sum_exp_logits, group=group)

        loss = torch.log(sum_exp_logits) - predicted_logits
        exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_input = softmax
        partition_vocab_size = softmax.size()[-1]
        grad_2d = grad_input.view(-1, partition_vocab_size)
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
        softmax_update = 1.0 - target_mask.view(-1).float()
        grad_2d[arange_1d, masked_target_1d] -= softmax_update
        grad_input.mul_(grad_output.unsqueeze(dim=-1))
        return grad_input, None


def vocab_parallel_cross_entropy(vocab_parallel_logits, target):
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target)
