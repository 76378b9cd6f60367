"""Point-to-point activation/gradient exchange between adjacent pipeline
stages (hand-written, in the style of the older Megatron p2p code).

Shapes are exchanged first (variable sequence lengths), then the payload."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _communicate_shapes(tensor_send_next, tensor_send_prev, recv_prev, recv_next, rank, device):
    recv_prev_shape_tensor = None
    recv_next_shape_tensor = None
    send_prev_shape_tensor = None
    send_next_shape_tensor = None
    if recv_prev:
        recv_prev_shape_tensor = torch.empty(3, device=device, dtype=torch.int64)
    if recv_next:
        recv_next_shape_tensor = torch.empty(3, device=device, dtype=torch.int64)
    if tensor_send_prev is not None:
        send_prev_shape_tensor = torch.tensor(tensor_send_prev.size(), device=device, dtype=torch.int64)
    if tensor_send_next is not None:
        send_next_shape_tensor = torch.tensor(tensor_send_next.size(), device=device, dtype=torch.int64)

    reqs = []
    if send_prev_shape_tensor is not None:
        reqs.append(dist.isend(send_prev_shape_tensor, rank - 1))
    if recv_prev_shape_tensor is not None:
        reqs.append(dist.irecv(recv_prev_shape_tensor, rank - 1))
    if send_next_shape_tensor is not None:
        reqs.append(dist.isend(send_next_shape_tensor, rank + 1))
    if recv_next_shape_tensor is not None:
        reqs.append(dist.irecv(recv_next_shape_tensor, rank + 1))
    for req in reqs:
        req.wait()
    if device.type == "cuda":
        torch.cuda.synchronize()

    recv_prev_shape = recv_prev_shape_tensor.tolist() if recv_prev_shape_tensor is not None else None
    recv_next_shape = recv_next_shape_tensor.tolist() if recv_next_shape_tensor is not None else None
    return recv_prev_shape, recv_next_shape


def _communicate(tensor_send_next, tensor_send_prev, recv_prev, recv_next, dtype, device):
    rank = dist.get_rank()
    recv_prev_shape, recv_next_shape = _communicate_shapes(
        tensor_send_next, tensor_send_prev, recv_prev, recv_next, rank, device
    )
    tensor_recv_prev = None
    tensor_recv_next = None
    if recv_prev:
        tensor_recv_prev = torch.empty(recv_prev_shape, requires_grad=True, device=device, dtype=dtype)
    if recv_next:
        tensor_recv_next = torch.empty(recv_next_shape, requires_grad=True, device=device, dtype=dtype)

    reqs = []
    if tensor_send_prev is not None:
        reqs.append(dist.isend(tensor_send_prev.contiguous(), rank - 1))
    if tensor_recv_prev is not None:
        reqs.append(dist.irecv(tensor_recv_prev, rank - 1))
    if tensor_send_next is not None:
        reqs.append(dist.isend(tensor_send_next.contiguous(), rank + 1))
    if tensor_recv_next is not None:
        reqs.append(dist.irecv(tensor_recv_next, rank + 1))
    for req in reqs:
        req.wait()
    if device.type == "cuda":
        # protect against race condition when using batch_isend_irecv()
        torch.cuda.synchronize()
    return tensor_recv_prev, tensor_recv_next


def recv_forward(dtype, device):
    t, _ = _communicate(None, None, recv_prev=True, recv_next=False, dtype=dtype, device=device)
    return t


def send_forward(output_tensor, device):
    _communicate(output_tensor.detach(), None, recv_prev=False, recv_next=False, dtype=output_tensor.dtype, device=device)


def recv_backward(dtype, device):
    _, t = _communicate(None, None, recv_prev=False, recv_next=True, dtype=dtype, device=device)
    return t


def send_backward(input_tensor_grad, device):
    _communicate(None, input_tensor_grad, recv_prev=False, recv_next=False, dtype=input_tensor_grad.dtype, device=device)
