"""DiT (Peebles & Xie) with adaLN-Zero blocks, optional LoRA adapters on attention."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def sincos_pos_embed(dim: int, gh: int, gw: int, device=None) -> torch.Tensor:
    """2-D sin/cos table for any grid, so the model runs at any latent size."""
    ys = torch.arange(gh, dtype=torch.float32, device=device)
    xs = torch.arange(gw, dtype=torch.float32, device=device)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    quarter = dim // 4
    omega = 1.0 / (10000 ** (torch.arange(quarter, dtype=torch.float32, device=device) / quarter))
    out = []
    for grid in (yy, xx):
        arg = grid.reshape(-1, 1) * omega.reshape(1, -1)
        out += [torch.sin(arg), torch.cos(arg)]
    return torch.cat(out, dim=1)  # [gh*gw, dim]


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.rank = rank
        self.scaling = alpha / rank
        self.lora_A = nn.Parameter(torch.zeros(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq_dim=256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = t.float()[:, None] * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(emb)


class LabelEmbedder(nn.Module):
    """Class embedding with one extra row used as the unconditional (null) label for CFG."""

    def __init__(self, num_classes, hidden, dropout_prob):
        super().__init__()
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob
        self.table = nn.Embedding(num_classes + int(dropout_prob > 0), hidden)

    def forward(self, labels, train: bool, force_drop=None):
        if force_drop is not None:
            labels = torch.where(force_drop, torch.full_like(labels, self.num_classes), labels)
        elif train and self.dropout_prob > 0:
            drop = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
            labels = torch.where(drop, torch.full_like(labels, self.num_classes), labels)
        return self.table(labels)


class Attention(nn.Module):
    def __init__(self, dim, heads, impl="sdpa"):
        super().__init__()
        self.heads = heads
        self.impl = impl
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.impl == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
            o = attn.softmax(dim=-1) @ v
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


class DiTBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio, impl):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, heads, impl)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hid = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hid), nn.GELU(approximate="tanh"), nn.Linear(hid, dim))
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x, c):
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), sh1, sc1))
        x = x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), sh2, sc2))
        return x


class FinalLayer(nn.Module):
    def __init__(self, dim, patch, out_ch):
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(dim, patch * patch * out_ch)
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x, c):
        shift, scale = self.adaLN(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm(x), shift, scale))


class DiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.in_ch = cfg.latent_channels
        self.out_ch = cfg.latent_channels * (2 if cfg.learn_sigma else 1)
        self.patch = cfg.patch_size
        self.x_embedder = nn.Conv2d(self.in_ch, cfg.hidden_size, cfg.patch_size, cfg.patch_size)
        self.t_embedder = TimestepEmbedder(cfg.hidden_size)
        self.y_embedder = LabelEmbedder(cfg.num_classes, cfg.hidden_size, cfg.class_dropout_prob)
        self.blocks = nn.ModuleList(
            DiTBlock(cfg.hidden_size, cfg.num_heads, cfg.mlp_ratio, cfg.attn_impl) for _ in range(cfg.depth))
        self.final_layer = FinalLayer(cfg.hidden_size, cfg.patch_size, self.out_ch)
        self._init_weights()
        if cfg.lora_rank > 0:
            self.add_lora(cfg.lora_rank, cfg.lora_alpha)

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        for blk in self.blocks:
            nn.init.zeros_(blk.adaLN[-1].weight)
            nn.init.zeros_(blk.adaLN[-1].bias)
        nn.init.zeros_(self.final_layer.linear.weight)
        nn.init.normal_(self.y_embedder.table.weight, std=0.02)

    def add_lora(self, rank, alpha):
        for blk in self.blocks:
            blk.attn.qkv = LoRALinear(blk.attn.qkv, rank, alpha)
        for n, p in self.named_parameters():
            p.requires_grad_("lora_" in n)

    def unpatchify(self, x, gh, gw):
        b = x.shape[0]
        p, c = self.patch, self.out_ch
        x = x.reshape(b, gh, gw, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, gh * p, gw * p)

    def forward(self, x, t, y, force_drop=None):
        x = self.x_embedder(x)                       # [B, D, gh, gw]
        gh, gw = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = x + sincos_pos_embed(x.shape[-1], gh, gw, x.device).to(x.dtype)
        c = self.t_embedder(t) + self.y_embedder(y, self.training, force_drop)
        for blk in self.blocks:
            x = blk(x, c)
        x = self.final_layer(x, c)
        return self.unpatchify(x, gh, gw)

    def forward_with_cfg(self, x, t, y, scale):
        """Classifier-free guidance: conditional and null-label halves in one batch."""
        xx = torch.cat([x, x])
        tt = torch.cat([t, t])
        yy = torch.cat([y, y])
        drop = torch.cat([torch.zeros_like(y, dtype=torch.bool), torch.ones_like(y, dtype=torch.bool)])
        out = self.forward(xx, tt, yy, force_drop=drop)[:, : self.in_ch]
        cond, uncond = out.chunk(2)
        return uncond + scale * (cond - uncond)
