"""Minimal MAE: ViT encoder on visible patches, light decoder, MSE on masked patches."""
import math

import torch
import torch.nn as nn


def sincos_pos_embed(dim, grid, cls_token=True):
    coords = torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij"), 0)
    coords = coords.reshape(2, -1).float()
    quarter = dim // 4
    omega = 1.0 / (10000 ** (torch.arange(quarter).float() / quarter))
    parts = []
    for c in coords:
        out = c[:, None] * omega[None]
        parts += [torch.sin(out), torch.cos(out)]
    emb = torch.cat(parts, 1)
    if cls_token:
        emb = torch.cat([torch.zeros(1, dim), emb], 0)
    return emb.unsqueeze(0)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class MaskedAutoencoderViT(nn.Module):
    def __init__(self, img_size=32, patch_size=4, in_chans=3, embed_dim=64, depth=2, num_heads=4,
                 decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=4, mlp_ratio=4.0,
                 mask_ratio=0.75, norm_pix_loss=True):
        super().__init__()
        assert img_size % patch_size == 0, f"img_size {img_size} not divisible by patch_size {patch_size}"
        self.patch_size = patch_size
        self.in_chans = in_chans
        self.grid = img_size // patch_size
        self.num_patches = self.grid ** 2
        self.mask_ratio = mask_ratio
        self.norm_pix_loss = norm_pix_loss

        self.patch_embed = nn.Conv2d(in_chans, embed_dim, patch_size, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.register_buffer("pos_embed", sincos_pos_embed(embed_dim, self.grid))
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)

        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.register_buffer("decoder_pos_embed", sincos_pos_embed(decoder_embed_dim, self.grid))
        self.decoder_blocks = nn.ModuleList(
            [Block(decoder_embed_dim, decoder_num_heads, mlp_ratio) for _ in range(decoder_depth)])
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size ** 2 * in_chans)
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)

    def patchify(self, imgs):
        p, g = self.patch_size, self.grid
        x = imgs.reshape(imgs.shape[0], self.in_chans, g, p, g, p)
        x = torch.einsum("nchpwq->nhwpqc", x)
        return x.reshape(imgs.shape[0], g * g, p * p * self.in_chans)

    def unpatchify(self, x):
        p, g = self.patch_size, self.grid
        x = x.reshape(x.shape[0], g, g, p, p, self.in_chans)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], self.in_chans, g * p, g * p)

    def random_masking(self, x):
        n, length, d = x.shape
        keep = int(length * (1 - self.mask_ratio))
        noise = torch.rand(n, length, device=x.device)
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :keep]
        x_masked = torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, d))
        mask = torch.ones(n, length, device=x.device)
        mask[:, :keep] = 0
        mask = torch.gather(mask, 1, ids_restore)
        return x_masked, mask, ids_restore

    def forward_encoder(self, imgs):
        x = self.patch_embed(imgs).flatten(2).transpose(1, 2)
        x = x + self.pos_embed[:, 1:, :]
        x, mask, ids_restore = self.random_masking(x)
        cls = (self.cls_token + self.pos_embed[:, :1, :]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x), mask, ids_restore

    def forward_decoder(self, x, ids_restore):
        x = self.decoder_embed(x)
        n_mask = ids_restore.shape[1] + 1 - x.shape[1]
        mask_tokens = self.mask_token.repeat(x.shape[0], n_mask, 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1) + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x)
        return self.decoder_pred(self.decoder_norm(x))[:, 1:, :]

    def forward_loss(self, imgs, pred, mask):
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = ((pred - target) ** 2).mean(dim=-1)
        return (loss * mask).sum() / mask.sum()

    def forward(self, imgs):
        latent, mask, ids_restore = self.forward_encoder(imgs)
        pred = self.forward_decoder(latent, ids_restore)
        return self.forward_loss(imgs, pred, mask), pred, mask


def build_model(mcfg):
    return MaskedAutoencoderViT(**mcfg)


def cosine_lr(step, total, base, warmup):
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * t))
