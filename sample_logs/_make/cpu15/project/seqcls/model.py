import math

import torch
from torch import nn


class SensorTransformer(nn.Module):
    """Encoder-only transformer over fixed-length windows of multichannel sensor data."""

    def __init__(self, n_features: int, n_classes: int, d_model: int = 128, n_heads: int = 4,
                 n_layers: int = 3, dim_ff: int = 256, max_len: int = 64, dropout: float = 0.1):
        super().__init__()
        self.max_len = max_len
        self.input_proj = nn.Linear(n_features, d_model)
        self.pos_emb = nn.Parameter(torch.zeros(1, max_len, d_model))
        nn.init.trunc_normal_(self.pos_emb, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_ff, dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [batch, time, features]
        t = x.shape[1]
        h = self.input_proj(x) * math.sqrt(self.input_proj.out_features)
        h = h + self.pos_emb[:, : min(t, self.max_len)]
        h = self.encoder(h)
        return self.head(self.norm(h.mean(dim=1)))
