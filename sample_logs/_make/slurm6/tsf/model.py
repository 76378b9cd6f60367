import torch
from torch import nn


class PatchMixer(nn.Module):
    """Split the context into patches, embed each patch, mix, and project to the horizon."""

    def __init__(self, n_ch, context, horizon, patch_len, d_model, batch_size):
        super().__init__()
        self.n_ch, self.horizon, self.patch_len = n_ch, horizon, patch_len
        self.n_patches = context // patch_len
        self.batch_size = batch_size
        self.embed = nn.Linear(patch_len * n_ch, d_model)
        self.mix = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.head = nn.Linear(self.n_patches * d_model, horizon * n_ch)

    def forward(self, x):  # x: (B, context, C)
        p = x.reshape(self.batch_size, self.n_patches, self.patch_len * self.n_ch)
        h = self.embed(p)
        h = h + self.mix(h)
        y = self.head(h.flatten(1))
        return y.view(-1, self.horizon, self.n_ch)
