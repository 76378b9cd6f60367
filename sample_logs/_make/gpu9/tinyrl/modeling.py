"""Tiny decoder-only LM with LoRA adapters and a preallocated KV cache, plus a reward model."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    def __init__(self, in_f: int, out_f: int, bias: bool = True):
        super().__init__()
        self.base = nn.Linear(in_f, out_f, bias=bias)
        self.lora_A: Optional[nn.Parameter] = None
        self.lora_B: Optional[nn.Parameter] = None
        self.scaling = 0.0

    def add_adapter(self, r: int, alpha: float):
        self.lora_A = nn.Parameter(torch.randn(r, self.base.in_features) / math.sqrt(self.base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(self.base.out_features, r))
        self.scaling = alpha / r

    def forward(self, x):
        y = self.base(x)
        if self.lora_A is not None:
            y = y + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling
        return y


class KVCache:
    """Static cache: [layers, 2, batch, heads, max_len, head_dim], filled left to right."""

    def __init__(self, n_layers, batch, n_heads, max_len, head_dim, dtype, device):
        self.buf = torch.zeros(n_layers, 2, batch, n_heads, max_len, head_dim, dtype=dtype, device=device)
        self.pos = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        t = k.shape[2]
        self.buf[layer, 0, :, :, self.pos:self.pos + t] = k
        self.buf[layer, 1, :, :, self.pos:self.pos + t] = v
        end = self.pos + t
        return self.buf[layer, 0, :, :, :end], self.buf[layer, 1, :, :, :end]


class Block(nn.Module):
    def __init__(self, d, h, dropout=0.0):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = LoRALinear(d, 3 * d)
        self.proj = LoRALinear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, attn_bias, cache: Optional[KVCache] = None, layer: int = 0):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.update(layer, k, v)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(B, T, D)))
        x = x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))
        return x


class PolicyLM(nn.Module):
    def __init__(self, vocab_size, d_model, n_layers, n_heads, max_seq_len, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.n_heads = n_heads

    def add_lora(self, r: int, alpha: float, targets: str):
        names = {t.strip() for t in targets.split(",")}
        for p in self.parameters():
            p.requires_grad_(False)
        for blk in self.blocks:
            for n in names:
                getattr(blk, n).add_adapter(r, alpha)

    def forward(self, ids, attn_mask=None, position_ids=None, cache: Optional[KVCache] = None,
                return_hidden=False):
        B, T = ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=ids.device).expand(B, T)
        x = self.embed(ids) + self.pos(position_ids)
        bias = _attn_bias(attn_mask, T, cache, x.dtype, ids.device)
        for i, blk in enumerate(self.blocks):
            x = blk(x, bias, cache, i)
        if cache is not None:
            cache.pos += T
        h = self.ln_f(x)
        logits = self.lm_head(h)
        return (logits, h) if return_hidden else logits


def _attn_bias(attn_mask, T, cache, dtype, device):
    """attn_mask: [B, S] (1 = real token) over everything seen so far (cache + new)."""
    past = cache.pos if cache is not None else 0
    S = past + T
    causal = torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=past)
    if attn_mask is None:
        return causal
    keep = causal[None, None] & attn_mask[:, None, None, :S].bool()
    # rows that see nothing (left padding) attend to themselves to avoid NaN
    keep = keep | torch.eye(T, S, dtype=torch.bool, device=device).roll(past, dims=1)[None, None]
    return keep


class RewardModel(nn.Module):
    """Small bidirectional encoder + scalar head, trained separately (checkpoints/rm)."""

    def __init__(self, vocab_size, hidden, n_layers=2, n_heads=4, max_seq_len=256):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden)
        self.pos = nn.Embedding(max_seq_len, hidden)
        layer = nn.TransformerEncoderLayer(hidden, n_heads, 4 * hidden, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, 1)

    def score_hidden(self, h, mask):
        last = mask.long().sum(1).clamp(min=1) - 1
        pooled = h[torch.arange(h.shape[0], device=h.device), last]
        return self.head(pooled).squeeze(-1)

    def forward(self, ids, mask):
        T = ids.shape[1]
        x = self.embed(ids) + self.pos(torch.arange(T, device=ids.device))
        h = self.encoder(x, src_key_padding_mask=~mask.bool())
        return self.score_hidden(h, mask)


def build_policy(mcfg) -> PolicyLM:
    return PolicyLM(mcfg.vocab_size, mcfg.d_model, mcfg.n_layers, mcfg.n_heads, mcfg.max_seq_len, mcfg.dropout)
