"""DDPM UNet (Ho et al. 2020 style): ResBlocks with timestep embedding, self-attention, class embedding."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb_dim, dropout, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(min(groups, cin), cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb_dim, cout)
        self.norm2 = nn.GroupNorm(min(groups, cout), cout)
        self.drop = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        return h + self.skip(x)


class AttnBlock(nn.Module):
    def __init__(self, ch, heads, groups):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(min(groups, ch), ch)
        self.qkv = nn.Conv2d(ch, 3 * ch, 1)
        self.proj = nn.Conv2d(ch, ch, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w)
        q, k, v = qkv.unbind(1)
        scale = (c // self.heads) ** -0.5
        attn = torch.einsum("bhci,bhcj->bhij", q * scale, k).softmax(dim=-1)
        out = torch.einsum("bhij,bhcj->bhci", attn, v).reshape(b, c, h, w)
        return x + self.proj(out)


class Downsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


class Upsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class UNet(nn.Module):
    def __init__(self, cfg, in_ch=3):
        super().__init__()
        ch, mult, nrb = cfg.base_channels, cfg.channel_mult, cfg.num_res_blocks
        temb_dim = ch * 4
        self.ch = ch
        self.num_classes = cfg.num_classes
        self.temb = nn.Sequential(nn.Linear(ch, temb_dim), nn.SiLU(), nn.Linear(temb_dim, temb_dim))
        self.label_emb = nn.Embedding(cfg.num_classes, temb_dim) if cfg.num_classes > 0 else None
        self.conv_in = nn.Conv2d(in_ch, ch, 3, padding=1)
        self.down = nn.ModuleList()
        chans = [ch]
        cur = ch
        for level, m in enumerate(mult):
            for _ in range(nrb):
                blocks = [ResBlock(cur, ch * m, temb_dim, cfg.dropout, cfg.groups)]
                cur = ch * m
                if level in cfg.attn_levels:
                    blocks.append(AttnBlock(cur, cfg.num_heads, cfg.groups))
                self.down.append(nn.ModuleList(blocks))
                chans.append(cur)
            if level != len(mult) - 1:
                self.down.append(nn.ModuleList([Downsample(cur)]))
                chans.append(cur)
        self.mid = nn.ModuleList([ResBlock(cur, cur, temb_dim, cfg.dropout, cfg.groups),
                                  AttnBlock(cur, cfg.num_heads, cfg.groups),
                                  ResBlock(cur, cur, temb_dim, cfg.dropout, cfg.groups)])
        self.up = nn.ModuleList()
        for level, m in reversed(list(enumerate(mult))):
            for _ in range(nrb + 1):
                blocks = [ResBlock(cur + chans.pop(), ch * m, temb_dim, cfg.dropout, cfg.groups)]
                cur = ch * m
                if level in cfg.attn_levels:
                    blocks.append(AttnBlock(cur, cfg.num_heads, cfg.groups))
                self.up.append(nn.ModuleList(blocks))
            if level != 0:
                self.up.append(nn.ModuleList([Upsample(cur)]))
        self.norm_out = nn.GroupNorm(min(cfg.groups, cur), cur)
        self.conv_out = nn.Conv2d(cur, in_ch, 3, padding=1)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    @staticmethod
    def _run(blocks, h, temb):
        for blk in blocks:
            h = blk(h, temb) if isinstance(blk, ResBlock) else blk(h)
        return h

    def forward(self, x, t, y=None):
        temb = self.temb(timestep_embedding(t, self.ch))
        if self.label_emb is not None and y is not None:
            temb = temb + self.label_emb(y)
        h = self.conv_in(x)
        hs = [h]
        for blocks in self.down:
            h = self._run(blocks, h, temb)
            hs.append(h)
        h = self._run(self.mid, h, temb)
        for blocks in self.up:
            if isinstance(blocks[0], ResBlock):
                h = torch.cat([h, hs.pop()], dim=1)
            h = self._run(blocks, h, temb)
        return self.conv_out(F.silu(self.norm_out(h)))
