"""Decoder-only GPT model built from the tensor-parallel layers in parallel.py."""
from __future__ import annotations

import logging
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import parallel as mpu

logger = logging.getLogger("lm.model")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x_fp32 = x.float()
        out = x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


class RotaryEmbedding(nn.Module):
    """Rotary position embedding with a lazily grown cos/sin cache."""

    def __init__(self, dim, max_position_embeddings, base=10000.0):
        super().__init__()
        self.dim = dim
        self.base = base
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, seq_len):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    # q, k: [b, heads, s, d]; cos, sin: [s, d]
    cos = cos[None, None, :, :]
    sin = sin[None, None, :, :]
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class ParallelAttention(nn.Module):
    def __init__(self, args, layer_number):
        super().__init__()
        self.layer_number = layer_number
        tp = mpu.get_tensor_model_parallel_world_size()
        self.hidden_size = args.hidden_size
        self.num_heads = args.num_attention_heads
        self.num_query_groups = args.num_query_groups or args.num_attention_heads
        self.head_dim = mpu.divide(args.hidden_size, args.num_attention_heads)
        self.num_heads_per_partition = mpu.divide(self.num_heads, tp)
        self.num_query_groups_per_partition = mpu.divide(self.num_query_groups, tp)
        self.attention_impl = args.attention_impl
        qkv_size = (self.num_heads + 2 * self.num_query_groups) * self.head_dim
        self.query_key_value = ColumnParallelLinear(args.hidden_size, qkv_size, bias=args.add_bias_linear,
                                                    init_std=args.init_method_std)
        self.dense = RowParallelLinear(self.num_heads * self.head_dim, args.hidden_size, bias=args.add_bias_linear,
                                       init_std=mpu.scaled_init_std(args.init_method_std, args.num_layers))

    def forward(self, hidden_states, rotary):
        b, s, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        nq = self.num_heads_per_partition * self.head_dim
        nkv = self.num_query_groups_per_partition * self.head_dim
        q, k, v = torch.split(qkv, [nq, nkv, nkv], dim=-1)
        q = q.view(b, s, self.num_heads_per_partition, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.num_query_groups_per_partition, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.num_query_groups_per_partition, self.head_dim).transpose(1, 2)
        cos, sin = rotary(s)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if self.num_query_groups_per_partition != self.num_heads_per_partition:
            rep = self.num_heads_per_partition // self.num_query_groups_per_partition
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)

        if self.attention_impl == "sdpa":
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # "eager": materialised scores, useful for debugging attention maps
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            causal = torch.ones(s, s, dtype=torch.bool, device=scores.device).triu_(1)
            scores = scores.masked_fill(causal, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1).to(v.dtype)
            ctx = torch.matmul(probs, v)
        ctx = ctx.transpose(1, 2).reshape(b, s, nq)
        return self.dense(ctx)


class ParallelMLP(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.swiglu = args.swiglu
        ffn = args.ffn_hidden_size
        self.dense_h_to_4h = ColumnParallelLinear(args.hidden_size, ffn * 2 if self.swiglu else ffn,
                                                  bias=args.add_bias_linear, init_std=args.init_method_std)
        self.dense_4h_to_h = RowParallelLinear(ffn, args.hidden_size, bias=args.add_bias_linear,
                                               init_std=mpu.scaled_init_std(args.init_method_std, args.num_layers))

    def forward(self, x):
        h = self.dense_h_to_4h(x)
        if self.swiglu:
            a, g = h.chunk(2, dim=-1)
            h = F.silu(a) * g
        else:
            h = F.gelu(h, approximate="tanh")
        return self.dense_4h_to_h(h)


class TransformerLayer(nn.Module):
    def __init__(self, args, layer_number):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, eps=args.norm_epsilon)
        self.self_attention = ParallelAttention(args, layer_number)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, eps=args.norm_epsilon)
        self.mlp = ParallelMLP(args)

    def forward(self, hidden_states, rotary):
        hidden_states = hidden_states + self.self_attention(self.input_layernorm(hidden_states), rotary)
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states


# re-exported for convenience
ColumnParallelLinear = mpu.ColumnParallelLinear
RowParallelLinear = mpu.RowParallelLinear


class GPTModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.padded_vocab_size = args.padded_vocab_size
        self.embedding = mpu.VocabParallelEmbedding(args.padded_vocab_size, args.hidden_size,
                                                    init_std=args.init_method_std)
        self.rotary_pos_emb = RotaryEmbedding(args.hidden_size // args.num_attention_heads,
                                              max_position_embeddings=args.seq_length,
                                              base=args.rotary_base)
        self.layers = nn.ModuleList([TransformerLayer(args, i + 1) for i in range(args.num_layers)])
        self.final_layernorm = RMSNorm(args.hidden_size, eps=args.norm_epsilon)

    def forward(self, input_ids, labels=None, attention_mask=None):
        if not self.training and attention_mask is not None and not attention_mask.all():
            # evaluation batches are right-padded; skip the all-padding tail
            real_len = int(attention_mask.sum(dim=1).max())
            input_ids = input_ids[:, :real_len]
            attention_mask = attention_mask[:, :real_len]
            if labels is not None:
                labels = labels[:, :real_len]

        hidden_states = self.embedding(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, self.rotary_pos_emb)
        hidden_states = self.final_layernorm(hidden_states)

        # output layer shares the (vocab-parallel) embedding weight
        hidden_parallel = mpu.copy_to_tensor_model_parallel_region(hidden_states)
        logits_parallel = F.linear(hidden_parallel, self.embedding.weight)
        logits = mpu.gather_from_tensor_model_parallel_region(logits_parallel)
        if labels is None:
            return logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100)
        return loss


def num_parameters(model):
    return sum(p.numel() for p in model.parameters())
