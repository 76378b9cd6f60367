import math

import torch
import torch.nn as nn

from .data import PAD


class SinusoidalPositions(nn.Module):
    def __init__(self, dim, max_positions):
        super().__init__()
        pos = torch.arange(max_positions).unsqueeze(1)
        div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(max_positions, dim)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class TransformerSeq2Seq(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, dim=64, heads=4, layers=2, ffn=128, dropout=0.1, max_positions=128):
        super().__init__()
        self.dim = dim
        self.src_embed = nn.Embedding(src_vocab, dim, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(tgt_vocab, dim, padding_idx=PAD)
        self.positions = SinusoidalPositions(dim, max_positions)
        self.transformer = nn.Transformer(dim, heads, layers, layers, ffn, dropout, batch_first=True)
        self.output = nn.Linear(dim, tgt_vocab)

    def encode(self, src):
        mask = src.eq(PAD)
        x = self.positions(self.src_embed(src) * math.sqrt(self.dim))
        return self.transformer.encoder(x, src_key_padding_mask=mask), mask

    def decode(self, prev, memory, memory_mask):
        t = prev.size(1)
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        y = self.positions(self.tgt_embed(prev) * math.sqrt(self.dim))
        h = self.transformer.decoder(y, memory, tgt_mask=causal, tgt_key_padding_mask=prev.eq(PAD),
                                     memory_key_padding_mask=memory_mask)
        return self.output(h)

    def forward(self, src, prev):
        memory, mask = self.encode(src)
        return self.decode(prev, memory, mask)


def label_smoothed_nll(logits, target, eps):
    lprobs = torch.log_softmax(logits, dim=-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - eps) * nll + eps * smooth
    mask = target.ne(PAD)
    return (loss * mask).sum(), (nll * mask).sum(), mask.sum()
