"""Conformer-lite encoder with CTC head + small attention decoder (joint CTC/attention)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank=0, alpha=16):
        super().__init__()
        self.base = base
        self.rank = rank
        if rank > 0:
            self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
            self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
            self.scale = alpha / rank

    def forward(self, x):
        y = self.base(x)
        if self.rank > 0:
            y = y + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale
        return y


class Conv2dSubsampling(nn.Module):
    def __init__(self, idim, d_model, channels=64):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, channels, 3, 2), nn.ReLU(), nn.Conv2d(channels, channels, 3, 2), nn.ReLU())
        self.out = nn.Linear(channels * (((idim - 1) // 2 - 1) // 2), d_model)

    def forward(self, x, lens):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.shape
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        lens = ((lens - 1) // 2 - 1) // 2
        return x, lens


class SelfAttention(nn.Module):
    def __init__(self, d, heads, lora_rank=0):
        super().__init__()
        self.h = heads
        self.dk = d // heads
        self.q = LoRALinear(nn.Linear(d, d), lora_rank)
        self.k = nn.Linear(d, d)
        self.v = LoRALinear(nn.Linear(d, d), lora_rank)
        self.o = nn.Linear(d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.h, self.dk).transpose(1, 2)
        k = self.k(x).view(b, -1, self.h, self.dk).transpose(1, 2)
        v = self.v(x).view(b, -1, self.h, self.dk).transpose(1, 2)
        # relative-position-free scaled dot product, scores kept in fp32 for stability
        scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) / math.sqrt(self.dk)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        attn = torch.softmax(scores, dim=-1).to(v.dtype)
        return self.o(torch.matmul(attn, v).transpose(1, 2).reshape(b, t, d))


class ConformerBlock(nn.Module):
    def __init__(self, d, heads, ff=4, kernel=15, dropout=0.1, lora_rank=0):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ff * d), nn.SiLU(), nn.Dropout(dropout), nn.Linear(ff * d, d))
        self.ln_att = nn.LayerNorm(d)
        self.att = SelfAttention(d, heads, lora_rank)
        self.ln_conv = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ff * d), nn.SiLU(), nn.Dropout(dropout), nn.Linear(ff * d, d))
        self.ln_out = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = x + 0.5 * self.ff1(x)
        x = x + self.drop(self.att(self.ln_att(x), mask))
        c = self.ln_conv(x).transpose(1, 2)
        c = F.glu(self.pw1(c), dim=1)
        c = self.pw2(F.silu(self.bn(self.dw(c))))
        x = x + self.drop(c.transpose(1, 2))
        x = x + 0.5 * self.ff2(x)
        return self.ln_out(x)


class AttentionDecoder(nn.Module):
    def __init__(self, vocab, d, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, 512, d))
        layer = nn.TransformerDecoderLayer(d, heads, 4 * d, 0.1, batch_first=True, norm_first=True)
        self.dec = nn.TransformerDecoder(layer, layers)
        self.out = nn.Linear(d, vocab)

    def forward(self, ys_in, memory, mem_mask):
        t = ys_in.shape[1]
        x = self.embed(ys_in) + self.pos[:, :t]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=ys_in.device), 1)
        x = self.dec(x, memory, tgt_mask=causal, memory_key_padding_mask=~mem_mask)
        return self.out(x)


class AsrModel(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.subsample = Conv2dSubsampling(cfg.input_dim, cfg.d_model)
        self.blocks = nn.ModuleList([ConformerBlock(cfg.d_model, cfg.heads, lora_rank=cfg.lora_rank) for _ in range(cfg.layers)])
        self.ctc_head = nn.Linear(cfg.d_model, vocab_size)
        self.decoder = AttentionDecoder(vocab_size, cfg.d_model, cfg.heads, cfg.dec_layers) if cfg.ctc_weight < 1.0 else None

    def encode(self, feats, lens):
        x, lens = self.subsample(feats, lens)
        mask = torch.arange(x.shape[1], device=x.device)[None, :] < lens[:, None]
        for blk in self.blocks:
            x = blk(x, mask)
        return x, lens, mask

    def forward(self, feats, feat_lens, ys, ys_lens, sos_id=1, eos_id=1, blank_id=0):
        enc, enc_lens, mask = self.encode(feats, feat_lens)
        out = {}
        if self.decoder is not None:
            ys_pad = ys.masked_fill(ys < 0, eos_id)
            sos = torch.full_like(ys_pad[:, :1], sos_id)
            ys_in = torch.cat([sos, ys_pad], 1)
            ys_out = torch.cat([ys, torch.full_like(ys[:, :1], -1)], 1)
            ys_out[torch.arange(ys.shape[0], device=ys.device), ys_lens] = eos_id
            logits = self.decoder(ys_in, enc, mask)
            out["att_loss"] = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ys_out.reshape(-1), ignore_index=-1)
        lp = F.log_softmax(self.ctc_head(enc).float(), -1).transpose(0, 1)
        targets = torch.cat([ys[i, : ys_lens[i]] for i in range(ys.shape[0])])
        out["ctc_loss"] = F.ctc_loss(lp, targets, enc_lens, ys_lens, blank=blank_id, reduction="mean", zero_infinity=True)
        w = self.cfg.ctc_weight
        out["loss"] = w * out["ctc_loss"] + (1 - w) * out.get("att_loss", 0.0)
        out["ctc_logits"] = lp.detach()
        out["enc_lens"] = enc_lens
        return out

    @staticmethod
    def greedy(lp, lens, blank_id=0):
        best = lp.argmax(-1).t().tolist()
        hyps = []
        for seq, n in zip(best, lens.tolist()):
            prev, h = None, []
            for t in seq[:n]:
                if t != prev and t != blank_id:
                    h.append(t)
                prev = t
            hyps.append(h)
        return hyps


class SpecAugment(nn.Module):
    def __init__(self, freq_mask=27, n_freq_masks=2, time_mask_ratio=0.05, n_time_masks=2):
        super().__init__()
        self.F = freq_mask
        self.nF = n_freq_masks
        self.tr = time_mask_ratio
        self.nT = n_time_masks

    def forward(self, x):
        b, t, f = x.shape
        x = x.clone()
        for i in range(b):
            for _ in range(self.nF):
                w = int(torch.randint(0, self.F + 1, (1,)))
                f0 = int(torch.randint(0, f - self.F, (1,)))
                x[i, :, f0:f0 + w] = 0
            for _ in range(self.nT):
                tw = max(1, int(t * self.tr))
                t0 = int(torch.randint(0, max(1, t - tw), (1,)))
                x[i, t0:t0 + tw, :] = 0
        return x
