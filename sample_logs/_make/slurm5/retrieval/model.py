"""Two-tower retrieval model: SASRec-style user tower over the item history, item tower on ids."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class UserTower(nn.Module):
    def __init__(self, item_emb, dim, heads, layers, max_seq_len, device_buckets):
        super().__init__()
        self.item_emb = item_emb
        self.pos = nn.Parameter(torch.zeros(1, max_seq_len, dim))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.device_emb = nn.Embedding(device_buckets, dim) if device_buckets else None
        self.out = nn.Linear(dim, dim)

    def forward(self, hist, device=None):
        pad = hist.eq(0)
        x = self.item_emb(hist) + self.pos
        x = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        u = (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        if self.device_emb is not None and device is not None:
            u = u + self.device_emb(device)
        return F.normalize(self.out(u), dim=-1)


class ItemTower(nn.Module):
    def __init__(self, item_emb, dim):
        super().__init__()
        self.item_emb = item_emb
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, items):
        return F.normalize(self.mlp(self.item_emb(items)), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, n_items, dim=32, heads=2, layers=1, max_seq_len=20, device_buckets=0, temperature=0.05):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.user = UserTower(self.item_emb, dim, heads, layers, max_seq_len, device_buckets)
        self.item = ItemTower(self.item_emb, dim)
        self.temperature = temperature

    def forward(self, hist, target, negs, device=None):
        u = self.user(hist, device)                                    # B x d
        cand = torch.cat([target.unsqueeze(1), negs], dim=1)           # B x (1+K)
        v = self.item(cand)                                            # B x (1+K) x d
        logits = torch.einsum("bd,bkd->bk", u, v) / self.temperature
        labels = torch.zeros(len(target), dtype=torch.long)
        return F.cross_entropy(logits, labels)
