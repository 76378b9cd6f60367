"""Vision Transformer (ViT/DeiT style) with SDPA attention, stochastic depth and optional checkpointing."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class PatchEmbed(nn.Module):
    def __init__(self, patch_size, in_chans, dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)                      # B, C, H/p, W/p
        return x.flatten(2).transpose(1, 2)   # B, N, C


class DropPath(nn.Module):
    """Per-sample stochastic depth."""

    def __init__(self, p=0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def _qkv(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self._qkv(x)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))

    def forward_with_weights(self, x):
        """Explicit softmax(QK^T) so the attention weights can be returned (SDPA does not return them)."""
        B, N, C = x.shape
        q, k, v = self._qkv(x)
        attn = (q @ k.transpose(-2, -1)) * (self.head_dim ** -0.5)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(out), attn


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio, drop_path):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.drop_path = DropPath(drop_path)

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x

    def forward_with_weights(self, x):
        a, w = self.attn.forward_with_weights(self.norm1(x))
        x = x + a
        x = x + self.mlp(self.norm2(x))
        return x, w


class VisionTransformer(nn.Module):
    def __init__(self, img_size=32, patch_size=4, in_chans=3, embed_dim=192, depth=6, num_heads=3,
                 mlp_ratio=4.0, drop_path=0.1, num_classes=10, grad_ckpt=False):
        super().__init__()
        self.patch_size = patch_size
        self.grid = img_size // patch_size
        self.patch_embed = PatchEmbed(patch_size, in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid * self.grid + 1, embed_dim))
        dpr = [drop_path * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads, mlp_ratio, p) for p in dpr)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)
        self.grad_ckpt = grad_ckpt
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def _pos_embed_for(self, grid: int):
        """Position embedding for a grid x grid token layout (bicubic interpolation for other sizes)."""
        if grid == self.grid:
            return self.pos_embed
        cls_pos, patch_pos = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        C = patch_pos.shape[-1]
        patch_pos = patch_pos.reshape(1, self.grid, self.grid, C).permute(0, 3, 1, 2)
        patch_pos = F.interpolate(patch_pos, size=(grid, grid), mode="bicubic", align_corners=False)
        return torch.cat([cls_pos, patch_pos.permute(0, 2, 3, 1).reshape(1, grid * grid, C)], dim=1)

    def _tokens(self, x, interpolate_pos=False):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        if interpolate_pos:
            return x + self._pos_embed_for(int(math.isqrt(x.shape[1] - 1)))
        return x + self.pos_embed

    def forward(self, x):
        x = self._tokens(x)
        for blk in self.blocks:
            if self.grad_ckpt and self.training:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return self.head(self.norm(x)[:, 0])

    @torch.no_grad()
    def attention_rollout(self, x):
        """Abnar & Zuidema attention rollout: CLS-to-patch relevance, any input resolution."""
        x = self._tokens(x, interpolate_pos=True)
        rollout = None
        for blk in self.blocks:
            x, w = blk.forward_with_weights(x)
            a = w.mean(dim=1)                                   # B, N, N (heads averaged)
            a = a + torch.eye(a.shape[-1], device=a.device, dtype=a.dtype)
            a = a / a.sum(dim=-1, keepdim=True)
            rollout = a if rollout is None else a @ rollout
        grid = int(math.isqrt(x.shape[1] - 1))
        return rollout[:, 0, 1:].reshape(-1, grid, grid)


def build_model(mcfg) -> VisionTransformer:
    return VisionTransformer(img_size=mcfg.img_size, patch_size=mcfg.patch_size, in_chans=mcfg.in_chans,
                             embed_dim=mcfg.embed_dim, depth=mcfg.depth, num_heads=mcfg.num_heads,
                             mlp_ratio=mcfg.mlp_ratio, drop_path=mcfg.drop_path,
                             num_classes=mcfg.num_classes, grad_ckpt=mcfg.grad_ckpt)
