"""Two small models: a conformer encoder for log-mel keyword spotting and a CIFAR-style ResNet."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------- conformer
class FeedForward(nn.Module):
    def __init__(self, d, mult, dropout):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, d * mult), nn.SiLU(), nn.Dropout(dropout),
            nn.Linear(d * mult, d), nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)


class SelfAttention(nn.Module):
    """Plain multi-head self-attention with a key padding mask (no fused kernels)."""

    def __init__(self, d, heads, dropout):
        super().__init__()
        assert d % heads == 0
        self.h, self.dk = heads, d // heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dk)
        scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        attn = self.drop(scores.softmax(dim=-1))
        y = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, d)
        return self.drop(self.out(y))


class ConvModule(nn.Module):
    def __init__(self, d, kernel, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        y = self.norm(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = F.silu(self.bn(self.dw(y)))
        return self.drop(self.pw2(y).transpose(1, 2))


class ConformerBlock(nn.Module):
    def __init__(self, d, heads, ff_mult, kernel, dropout):
        super().__init__()
        self.ff1 = FeedForward(d, ff_mult, dropout)
        self.mhsa = SelfAttention(d, heads, dropout)
        self.conv = ConvModule(d, kernel, dropout)
        self.ff2 = FeedForward(d, ff_mult, dropout)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, pad_mask):
        x = x + 0.5 * self.ff1(x)
        x = x + self.mhsa(x, pad_mask)
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.norm(x)


class TinyConformer(nn.Module):
    def __init__(self, n_mels, num_classes, d_model=96, heads=4, layers=2, ff_mult=2, kernel=15,
                 dropout=0.1):
        super().__init__()
        self.subsample = nn.Sequential(
            nn.Conv1d(n_mels, d_model, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(d_model, d_model, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.blocks = nn.ModuleList(
            [ConformerBlock(d_model, heads, ff_mult, kernel, dropout) for _ in range(layers)]
        )
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, feats, lengths):
        # feats: [B, T, n_mels]
        x = self.subsample(feats.transpose(1, 2)).transpose(1, 2)
        t = x.shape[1]
        sub_len = torch.div(lengths + 3, 4, rounding_mode="floor").clamp(min=1, max=t)
        pad_mask = torch.arange(t, device=x.device)[None, :] >= sub_len[:, None]
        for blk in self.blocks:
            x = blk(x, pad_mask)
        keep = (~pad_mask).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1)
        return self.head(pooled)


# --------------------------------------------------------------------------- resnet
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class TinyResNet(nn.Module):
    def __init__(self, num_classes, widths=(16, 32, 64), blocks=(1, 1, 1), in_ch=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_ch, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x, lengths=None):
        x = self.layers(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def build_model(cfg):
    m = cfg.model
    if m.arch == "conformer":
        return TinyConformer(
            n_mels=cfg.data.n_mels, num_classes=cfg.data.num_classes, d_model=m.d_model,
            heads=m.heads, layers=m.layers, ff_mult=m.ff_mult, kernel=m.kernel, dropout=m.dropout,
        )
    if m.arch == "resnet":
        return TinyResNet(num_classes=cfg.data.num_classes, widths=tuple(m.widths), blocks=tuple(m.blocks))
    raise ValueError(f"unknown model.arch {m.arch!r}")
