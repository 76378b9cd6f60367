"""A LLaMA-style decoder (RMSNorm, SwiGLU, RoPE or learned positions, GQA)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


class RotaryCache(nn.Module):
    """cos/sin tables, grown on demand when a longer sequence shows up."""

    def __init__(self, head_dim, max_seq_len, theta):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self._len = 0
        self._build(max_seq_len, torch.device("cpu"))

    def _build(self, n, device):
        inv = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, device=device).float() / self.head_dim))
        t = torch.arange(n, device=device).float()
        freqs = torch.outer(t, inv)
        self.cos, self.sin = freqs.cos(), freqs.sin()
        self._len = n

    def forward(self, seqlen, device):
        if seqlen > self._len or self.cos.device != device:
            self._build(max(seqlen, self._len), device)
        return self.cos[:seqlen], self.sin[:seqlen]


def apply_rope(x, cos, sin):
    # x: [B, H, L, D]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, None], sin[None, None]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.impl = cfg.attn_impl
        self.wq = nn.Linear(cfg.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x, rope=None):
        B, L, _ = x.shape
        q = self.wq(x).view(B, L, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, L, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, L, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if self.impl == "eager":
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            causal = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
            out = scores.softmax(-1) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(B, L, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim)
        self.ffn = FeedForward(cfg)

    def forward(self, x, rope=None):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.ffn(self.ffn_norm(x))


class CausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.dim) if cfg.pos_emb == "learned" else None
        self.rope = (RotaryCache(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)
                     if cfg.pos_emb == "rope" else None)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        # multi-token prediction: predicts token t+2 from the final hidden state
        self.mtp_head = nn.Linear(cfg.dim, cfg.dim, bias=False) if cfg.mtp_head else None
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, input_ids, position_ids=None, return_mtp=False):
        B, L = input_ids.shape
        h = self.tok_emb(input_ids)
        rope = None
        if self.pos_emb is not None:
            if position_ids is None:
                position_ids = torch.arange(L, device=input_ids.device).unsqueeze(0)
            h = h + self.pos_emb(position_ids)
        else:
            rope = self.rope(L, input_ids.device)
        for layer in self.layers:
            h = layer(h, rope)
        h = self.norm(h)
        logits = self.lm_head(h)
        if return_mtp and self.mtp_head is not None:
            return logits, self.lm_head(self.mtp_head(h))
        return logits


def count_params(model):
    total = sum(p.numel() for p in model.parameters())
    train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return total, train
