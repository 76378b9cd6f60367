"""Optimizers: AdamW with DP grad all-reduce, a buffer-sharded distributed optimizer,
torch's ZeroRedundancyOptimizer, fp16 loss scaling, TP-aware grad clipping, EMA."""

import math

import torch
import torch.distributed as dist

from . import parallel_state as ps
from .tensor_parallel import param_is_not_tensor_parallel_duplicate
from .utils import print_rank_0

try:  # torch >= 2.5
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover
    from torch.distributed._tensor import DTensor


_DDP_BUCKET_NUMEL = 2 ** 28


def get_param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if name.endswith(".bias") or param.dim() == 1:
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


# ------------------------------------------------------------------ loss scaling

class ConstantGradScaler:
    def __init__(self, scale):
        self.scale = float(scale)

    def update(self, found_inf):
        pass


class DynamicGradScaler:
    def __init__(self, initial_scale, min_scale, growth_interval, hysteresis):
        self.scale = float(initial_scale)
        self.min_scale = float(min_scale)
        self.growth_interval = int(growth_interval)
        self.hysteresis = hysteresis
        self._growth_tracker = 0
        self._hysteresis_tracker = hysteresis

    def update(self, found_inf):
        if found_inf:
            self._growth_tracker = 0
            self._hysteresis_tracker -= 1
            if self._hysteresis_tracker <= 0:
                self.scale = max(self.scale / 2.0, self.min_scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._hysteresis_tracker = self.hysteresis
                self.scale = self.scale * 2.0


# ------------------------------------------------------------------- lr schedule

class OptimizerParamScheduler:
    def __init__(self, optimizer, max_lr, min_lr, warmup_steps, decay_steps, decay_style):
        self.optimizer = optimizer
        self.max_lr = max_lr
        self.min_lr = min_lr
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        self.decay_style = decay_style
        self.num_steps = 0
        print_rank_0("> learning rate decay style: {}".format(decay_style))
        self.step(0)

    def get_lr(self):
        if self.warmup_steps > 0 and self.num_steps <= self.warmup_steps:
            return self.max_lr * float(self.num_steps) / float(self.warmup_steps)
        if self.decay_style == "constant":
            return self.max_lr
        if self.num_steps > self.decay_steps:
            return self.min_lr
        num_steps_ = self.num_steps - self.warmup_steps
        decay_steps_ = max(1, self.decay_steps - self.warmup_steps)
        decay_ratio = float(num_steps_) / float(decay_steps_)
        delta_lr = self.max_lr - self.min_lr
        if self.decay_style == "linear":
            coeff = 1.0 - decay_ratio
        else:
            coeff = 0.5 * (math.cos(math.pi * decay_ratio) + 1.0)
        return self.min_lr + coeff * delta_lr

    def step(self, increment):
        self.num_steps += increment
        new_lr = self.get_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = new_lr

    def state_dict(self):
        return {"max_lr": self.max_lr, "min_lr": self.min_lr, "num_steps": self.num_steps,
                "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps,
                "decay_style": self.decay_style}

    def load_state_dict(self, sd):
        self.num_steps = sd["num_steps"]
        self.step(0)


# --------------------------------------------------------- buffer-sharded optimizer

class DistributedOptimizer:
    """Grad buffer reduce-scattered over the data-parallel group, each rank updates a
    contiguous shard of fp32 main params, then the params are all-gathered back."""

    def __init__(self, param_groups, lr, betas, eps):
        self.dp_group = ps.get_data_parallel_group()
        self.dp_size = ps.get_data_parallel_world_size()
        self.dp_rank = ps.get_data_parallel_rank()
        self.params = [p for g in param_groups for p in g["params"]]
        device = self.params[0].device
        self.numel = sum(p.numel() for p in self.params)
        self.shard_numel = self.numel // self.dp_size
        self.grad_buffer = torch.zeros(self.numel, dtype=torch.float, device=device)
        self.param_buffer = torch.zeros(self.numel, dtype=torch.float, device=device)
        self.wd_buffer = torch.zeros(self.numel, dtype=torch.float, device=device)
        self.index = []
        offset = 0
        for g in param_groups:
            for p in g["params"]:
                self.index.append((p, offset, p.numel()))
                self.param_buffer[offset:offset + p.numel()].copy_(p.detach().view(-1))
                self.wd_buffer[offset:offset + p.numel()].fill_(g["weight_decay"])
                offset += p.numel()
        start = self.dp_rank * self.shard_numel
        self.shard_range = (start, start + self.shard_numel)
        self.main_shard = torch.nn.Parameter(
            self.param_buffer[start:start + self.shard_numel].clone())
        self.wd_shard = self.wd_buffer[start:start + self.shard_numel].clone()
        self.inner = torch.optim.AdamW([self.main_shard], lr=lr, betas=betas, eps=eps,
                                       weight_decay=0.0)
        self.param_groups = self.inner.param_groups
        print_rank_0("> distributed optimizer: {} params, shard of {} elements per DP rank".format(
            self.numel, self.shard_numel))

    def reduce_scatter_grads(self):
        for p, off, n in self.index:
            if p.grad is None:
                self.grad_buffer[off:off + n].zero_()
            else:
                self.grad_buffer[off:off + n].copy_(p.grad.view(-1))
        self.grad_buffer.div_(self.dp_size)
        grad_shard = torch.empty(self.shard_numel, dtype=torch.float, device=self.grad_buffer.device)
        dist.reduce_scatter_tensor(grad_shard, self.grad_buffer, group=self.dp_group)
        self.main_shard.grad = grad_shard

    def local_grad_sq_norm(self):
        return torch.linalg.vector_norm(self.main_shard.grad.float()) ** 2

    def scale_grads(self, coeff):
        self.main_shard.grad.mul_(coeff)

    def step(self):
        lr = self.inner.param_groups[0]["lr"]
        with torch.no_grad():
            self.main_shard.mul_(1.0 - lr * self.wd_shard)
        self.inner.step()
        dist.all_gather_into_tensor(self.param_buffer, self.main_shard.detach(),
                                    group=self.dp_group)
        with torch.no_grad():
            for p, off, n in self.index:
                p.copy_(self.param_buffer[off:off + n].view_as(p))

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None
        self.main_shard.grad = None

    def state_dict(self):
        return {"inner": self.inner.state_dict(), "shard_range": self.shard_range}

    def load_state_dict(self, sd):
        self.inner.load_state_dict(sd["inner"])


# --------------------------------------------------------------------- wrapper

class MegatronOptimizer:
    def __init__(self, args, model):
        self.args = args
        self.model = model
        self.layout = args.parallel_layout
        self.params = [p for p in model.parameters() if p.requires_grad]
        param_groups = get_param_groups(model, args.weight_decay)
        betas = (args.adam_beta1, args.adam_beta2)
        self.mode = "ddp"
        if self.layout == "fsdp2":
            self.mode = "fsdp2"
            self.optimizer = torch.optim.AdamW(param_groups, lr=args.lr, betas=betas,
                                               eps=args.adam_eps)
        elif args.use_distributed_optimizer and args.distributed_optimizer_impl == "zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            self.mode = "zero"
            self.optimizer = ZeroRedundancyOptimizer(
                param_groups, optimizer_class=torch.optim.AdamW,
                process_group=ps.get_data_parallel_group(), lr=args.lr, betas=betas,
                eps=args.adam_eps)
        elif args.use_distributed_optimizer:
            self.mode = "buffer"
            self.optimizer = DistributedOptimizer(param_groups, args.lr, betas, args.adam_eps)
        else:
            self.optimizer = torch.optim.AdamW(param_groups, lr=args.lr, betas=betas,
                                               eps=args.adam_eps)
        self.param_groups = self.optimizer.param_groups

        self.grad_scaler = None
        if args.fp16:
            if args.loss_scale:
                self.grad_scaler = ConstantGradScaler(args.loss_scale)
            else:
                self.grad_scaler = DynamicGradScaler(args.initial_loss_scale, args.min_loss_scale,
                                                     args.loss_scale_window, args.hysteresis)

    # ----------------------------------------------------------------
    def get_loss_scale(self):
        return self.grad_scaler.scale if self.grad_scaler is not None else 1.0

    def scale_loss(self, loss):
        return loss * self.get_loss_scale()

    def zero_grad(self):
        if self.mode == "buffer":
            self.optimizer.zero_grad()
        else:
            for p in self.params:
                p.grad = None

    def _allreduce_gradients(self):
        dp = ps.get_data_parallel_world_size()
        if dp == 1:
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        for g in grads:
            g.div_(dp)
            # bucket very large gradients so that a single call stays below 2**31 elements
            for bucket in g.view(-1).split(_DDP_BUCKET_NUMEL):
                dist.all_reduce(bucket, group=ps.get_data_parallel_group())

    def _unscale_and_check(self):
        """Returns True when an inf/nan was found (dynamic loss scaling only)."""
        if self.grad_scaler is None:
            return False
        inv = 1.0 / self.grad_scaler.scale
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(inv)
        if isinstance(self.grad_scaler, ConstantGradScaler):
            return False
        found_inf = torch.zeros(1, dtype=torch.float, device=self.params[0].device)
        for p in self.params:
            if p.grad is not None and not torch.isfinite(p.grad).all():
                found_inf.fill_(1.0)
                break
        dist.all_reduce(found_inf, op=dist.ReduceOp.MAX)
        return found_inf.item() > 0

    def _grad_norm_and_clip(self, max_norm):
        if self.mode == "fsdp2":
            total = torch.nn.utils.clip_grad_norm_(self.params, max_norm if max_norm > 0 else 1e30)
            if isinstance(total, DTensor):
                total = total.full_tensor()
            return total.item()
        device = self.params[0].device
        if self.mode == "buffer":
            total_sq = self.optimizer.local_grad_sq_norm().reshape(1)
            dist.all_reduce(total_sq)
            total_sq = total_sq / ps.get_tensor_model_parallel_world_size()
        else:
            total_sq = torch.zeros(1, dtype=torch.float, device=device)
            for p in self.params:
                if p.grad is not None and param_is_not_tensor_parallel_duplicate(p):
                    total_sq += torch.linalg.vector_norm(p.grad.float()) ** 2
            if ps.get_tensor_model_parallel_world_size() > 1:
                dist.all_reduce(total_sq, group=ps.get_tensor_model_parallel_group())
        grad_norm = total_sq.sqrt().item()
        if max_norm > 0:
            clip_coeff = max_norm / (grad_norm + 1.0e-6)
            if clip_coeff < 1.0:
                if self.mode == "buffer":
                    self.optimizer.scale_grads(clip_coeff)
                else:
                    for p in self.params:
                        if p.grad is not None:
                            p.grad.mul_(clip_coeff)
        return grad_norm

    def step(self):
        """Returns (update_successful, grad_norm)."""
        if self.mode in ("ddp", "zero"):
            self._allreduce_gradients()
        found_inf = self._unscale_and_check()
        if self.grad_scaler is not None:
            self.grad_scaler.update(found_inf)
        if found_inf:
            self.zero_grad()
            return False, None
        if self.mode == "buffer":
            self.optimizer.reduce_scatter_grads()
        grad_norm = self._grad_norm_and_clip(self.args.clip_grad)
        self.optimizer.step()
        return True, grad_norm

    def state_dict(self):
        if self.mode == "zero":
            return {}  # consolidated on demand only
        sd = {"optimizer": self.optimizer.state_dict()}
        if self.grad_scaler is not None:
            sd["grad_scaler"] = {"scale": self.grad_scaler.scale}
        return sd

    def load_state_dict(self, sd):
        if "optimizer" in sd:
            self.optimizer.load_state_dict(sd["optimizer"])
        if "grad_scaler" in sd and self.grad_scaler is not None:
            self.grad_scaler.scale = sd["grad_scaler"]["scale"]


def calc_params_l2_norm(model):
    device = next(model.parameters()).device
    norm_sq = torch.zeros(1, dtype=torch.float, device=device)
    for p in model.parameters():
        if param_is_not_tensor_parallel_duplicate(p):
            norm_sq += p.detach().float().pow(2).sum()
    if ps.get_tensor_model_parallel_world_size() > 1:
        dist.all_reduce(norm_sq, group=ps.get_tensor_model_parallel_group())
    return norm_sq.sqrt().item()


class EMA:
    """Exponential moving average of the weights, kept unsharded so that it can be
    exported as a single consolidated file."""

    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = {}
        for name, p in model.named_parameters():
            full = p.full_tensor() if isinstance(p, DTensor) else p
            self.shadow[name] = full.detach().clone().float()
        nbytes = sum(t.numel() * t.element_size() for t in self.shadow.values())
        print_rank_0("> EMA of weights enabled (decay {}), {:.1f} MB per rank".format(
            decay, nbytes / 2 ** 20))

    @torch.no_grad()
    def update(self, model):
        for name, p in model.named_parameters():
            self.shadow[name].lerp_(p.detach().float(), 1.0 - self.decay)

    def state_dict(self):
        return dict(self.shadow)
