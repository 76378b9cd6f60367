"""Tiny decoder-only transformer (RoPE, RMSNorm, SwiGLU) with an optional
expert-parallel mixture-of-experts MLP.

The model can be built whole (data parallel) or as one stage of a two-stage
pipeline (``build_stage``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 512
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 128
    max_position_embeddings: int = 64
    rope_theta: float = 10000.0
    lm_head_bias: bool = False
    moe_layers: list = field(default_factory=list)
    moe_num_experts: int = 4
    moe_aux_loss_coef: float = 0.01
    moe_expert_scale: bool = False
    moe_ignore_padding: bool = True
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, d):
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).type_as(x) * self.weight


def build_rope_cache(max_pos, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(max_pos).float()
    freqs = torch.outer(t, inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rotary(x, cos, sin):
    # x: [B, H, T, Dh]; cos/sin: [max_pos, Dh/2]
    seq_len = x.size(2)
    cos = cos[:seq_len].to(x.dtype)
    sin = sin[:seq_len].to(x.dtype)
    x1, x2 = x[..., ::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        cos, sin = build_rope_cache(cfg.max_position_embeddings, self.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        q = apply_rotary(q, self.rope_cos, self.rope_sin)
        k = apply_rotary(k, self.rope_cos, self.rope_sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x, attention_mask=None):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with autograd (the backward pass is the reverse exchange)."""

    @staticmethod
    def forward(ctx, x, output_splits, input_splits, group):
        ctx.output_splits = output_splits
        ctx.input_splits = input_splits
        ctx.group = group
        x = x.contiguous()
        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(
            out, x, output_split_sizes=output_splits, input_split_sizes=input_splits, group=group
        )
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grad_out = grad_out.contiguous()
        grad_in = grad_out.new_empty((sum(ctx.input_splits),) + tuple(grad_out.shape[1:]))
        dist.all_to_all_single(
            grad_in,
            grad_out,
            output_split_sizes=ctx.input_splits,
            input_split_sizes=ctx.output_splits,
            group=ctx.group,
        )
        return grad_in, None, None, None


class MoEMLP(nn.Module):
    """Top-1 switch MLP. Experts are sharded over the expert-parallel group
    (the whole world): rank r owns experts [r*L, (r+1)*L)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_experts = cfg.moe_num_experts
        self.ep_size = dist.get_world_size() if dist.is_initialized() else 1
        self.ep_rank = dist.get_rank() if dist.is_initialized() else 0
        if self.num_experts % self.ep_size != 0:
            raise ValueError(
                f"moe_num_experts ({self.num_experts}) must be divisible by the expert-parallel size ({self.ep_size})"
            )
        self.num_local_experts = self.num_experts // self.ep_size
        self.router = nn.Linear(cfg.d_model, self.num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(cfg.d_model, cfg.d_ff) for _ in range(self.num_local_experts))
        self.ignore_padding = cfg.moe_ignore_padding
        if cfg.moe_expert_scale:
            # learned per-expert output scale
            self.expert_scale = nn.Parameter(torch.ones(self.num_local_experts))
        else:
            self.expert_scale = None
        self.aux_loss = None

    def forward(self, x, attention_mask=None):
        B, T, D = x.shape
        tokens = x.reshape(-1, D)
        logits = self.router(tokens)
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        gate, expert_idx = probs.max(dim=-1)
        if self.expert_scale is not None:
            gate = gate * self.expert_scale[expert_idx]

        # switch-transformer load balancing loss
        frac = torch.bincount(expert_idx, minlength=self.num_experts).float() / expert_idx.numel()
        self.aux_loss = self.num_experts * (frac * probs.mean(0)).sum()

        if self.ignore_padding and attention_mask is not None:
            routed = expert_idx[attention_mask.reshape(-1).bool()]
        else:
            routed = expert_idx
        send_counts = torch.bincount(routed, minlength=self.num_experts)

        # sort tokens by expert so that each destination rank gets a contiguous slice
        order = torch.argsort(expert_idx, stable=True)
        dispatched = tokens[order]

        if self.ep_size > 1:
            recv_counts = torch.empty_like(send_counts)
            dist.all_to_all_single(recv_counts, send_counts)
            input_splits = send_counts.view(self.ep_size, -1).sum(1).tolist()
            output_splits = recv_counts.view(self.ep_size, -1).sum(1).tolist()
            received = _AllToAll.apply(dispatched, output_splits, input_splits, None)
            per_chunk = recv_counts.view(self.ep_size, self.num_local_experts).reshape(-1).tolist()
        else:
            received = dispatched
            per_chunk = send_counts.tolist()

        chunks = received.split(per_chunk, dim=0)
        outs = [self.experts[i % self.num_local_experts](c) for i, c in enumerate(chunks)]
        expert_out = torch.cat(outs, dim=0)

        if self.ep_size > 1:
            returned = _AllToAll.apply(expert_out, input_splits, output_splits, None)
        else:
            returned = expert_out

        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        combined = returned[inverse] * gate.unsqueeze(-1).to(returned.dtype)
        return combined.view(B, T, D)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.attn_norm = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model)
        if layer_idx in cfg.moe_layers:
            self.mlp = MoEMLP(cfg)
        else:
            self.mlp = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x, attention_mask=None):
        x = x + self.attn(self.attn_norm(x))
        x = x + self.mlp(self.mlp_norm(x), attention_mask)
        return x


class DecoderStage(nn.Module):
    """Layers [first, last) of the decoder. The first stage owns the token
    embedding, the last stage owns the final norm and the LM head."""

    def __init__(self, cfg: ModelConfig, first: int, last: int, has_embed: bool, has_head: bool):
        super().__init__()
        self.cfg = cfg
        self.has_embed = has_embed
        self.has_head = has_head
        if has_embed:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleDict({str(i): Block(cfg, i) for i in range(first, last)})
        if has_head:
            self.norm = RMSNorm(cfg.d_model)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.lm_head_bias)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.cfg.initializer_range)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=self.cfg.initializer_range)

    def aux_loss(self):
        total = None
        for layer in self.layers.values():
            if isinstance(layer.mlp, MoEMLP) and layer.mlp.aux_loss is not None:
                a = layer.mlp.aux_loss * self.cfg.moe_aux_loss_coef
                total = a if total is None else total + a
        return total

    def forward(self, inputs, attention_mask=None, labels=None):
        h = self.embed_tokens(inputs) if self.has_embed else inputs
        for layer in self.layers.values():
            h = layer(h, attention_mask)
        if not self.has_head:
            return h
        logits = self.lm_head(self.norm(h)).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
            aux = self.aux_loss()
            if aux is not None:
                loss = loss + aux
        return loss, logits


def build_model(cfg: ModelConfig) -> DecoderStage:
    return DecoderStage(cfg, 0, cfg.n_layers, has_embed=True, has_head=True)


def stage_layer_range(cfg: ModelConfig, stage: int, num_stages: int, split=None):
    if split is None:
        per = math.ceil(cfg.n_layers / num_stages)
        bounds = [min(i * per, cfg.n_layers) for i in range(num_stages + 1)]
    else:
        bounds = [0] + list(split) + [cfg.n_layers]
    return bounds[stage], bounds[stage + 1]


def build_stage(cfg: ModelConfig, stage: int, num_stages: int, split=None) -> DecoderStage:
    first, last = stage_layer_range(cfg, stage, num_stages, split)
    return DecoderStage(cfg, first, last, has_embed=(stage == 0), has_head=(stage == num_stages - 1))


def expert_parameter_names(model: nn.Module):
    names = []
    for name, module in model.named_modules():
        if isinstance(module, MoEMLP):
            for pname, _ in module.experts.named_parameters():
                names.append(f"{name}.experts.{pname}")
    return names


def count_parameters(model: nn.Module):
    return sum(p.numel() for p in model.parameters())
