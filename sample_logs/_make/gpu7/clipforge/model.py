"""A small CLIP: ViT image tower, causal text transformer, LoRA adapters, optional aux head."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Linear):
    def __init__(self, in_f, out_f, bias=True, rank=0, alpha=16.0):
        super().__init__(in_f, out_f, bias=bias)
        self.rank = rank
        if rank > 0:
            self.lora_A = nn.Parameter(torch.empty(rank, in_f))
            self.lora_B = nn.Parameter(torch.zeros(out_f, rank))
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.scaling = alpha / rank

    def forward(self, x):
        y = super().forward(x)
        if self.rank > 0:
            y = y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling
        return y


class Attention(nn.Module):
    def __init__(self, width, heads, causal, lora_rank, lora_alpha):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = LoRALinear(width, 3 * width, rank=lora_rank, alpha=lora_alpha)
        self.proj = LoRALinear(width, width, rank=lora_rank, alpha=lora_alpha)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, width, heads, causal=False, lora_rank=0, lora_alpha=16.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads, causal, lora_rank, lora_alpha)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.grid = cfg.image_size // cfg.patch_size
        w = cfg.vision_width
        self.conv1 = nn.Conv2d(cfg.in_chans, w, cfg.patch_size, cfg.patch_size, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(w) * w ** -0.5)
        self.positional_embedding = nn.Parameter(torch.randn(self.grid * self.grid + 1, w) * 0.02)
        self.ln_pre = nn.LayerNorm(w)
        self.blocks = nn.ModuleList(
            Block(w, cfg.vision_heads, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha)
            for _ in range(cfg.vision_layers))
        self.ln_post = nn.LayerNorm(w)
        self.proj = nn.Linear(w, cfg.embed_dim, bias=False)

    def forward(self, x):
        x = self.conv1(x).flatten(2).transpose(1, 2)                      # B, N, W
        cls = self.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
        x = torch.cat([cls, x], dim=1)
        x = x + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x)
        for blk in self.blocks:
            x = blk(x)
        pooled = self.ln_post(x[:, 0])
        return self.proj(pooled), pooled


class TextTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        w = cfg.text_width
        self.token_embedding = nn.Embedding(cfg.vocab_size, w)
        self.positional_embedding = nn.Parameter(torch.randn(cfg.context_length, w) * 0.01)
        self.blocks = nn.ModuleList(
            Block(w, cfg.text_heads, causal=True, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha)
            for _ in range(cfg.text_layers))
        self.ln_final = nn.LayerNorm(w)
        self.text_projection = nn.Linear(w, cfg.embed_dim, bias=False)

    def forward(self, tokens):
        x = self.token_embedding(tokens) + self.positional_embedding[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_final(x)
        eos = tokens.argmax(dim=-1)                                       # EOS has the largest id
        return self.text_projection(x[torch.arange(x.shape[0], device=x.device), eos])


class CLIP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.visual = VisionTransformer(cfg)
        self.text = TextTransformer(cfg)
        self.logit_scale = nn.Parameter(torch.full((1,), math.log(1 / 0.07)))
        self.aux_head = nn.Linear(cfg.vision_width, cfg.num_classes) if cfg.num_classes > 0 else None

    def encode_image(self, images):
        return F.normalize(self.visual(images)[0], dim=-1)

    def encode_text(self, tokens):
        return F.normalize(self.text(tokens), dim=-1)

    def forward(self, images, tokens):
        img, pooled = self.visual(images)
        out = {
            "image_features": F.normalize(img, dim=-1),
            "text_features": F.normalize(self.text(tokens), dim=-1),
            "logit_scale": self.logit_scale.exp().clamp(max=100),
        }
        if self.aux_head is not None:
            out["aux_logits"] = self.aux_head(pooled)
        return out


def count_params(m: nn.Module):
    total = sum(p.numel() for p in m.parameters())
    trainable = sum(p.numel() for p in m.parameters() if p.requires_grad)
    return total, trainable
