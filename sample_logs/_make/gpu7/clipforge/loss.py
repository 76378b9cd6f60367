"""Contrastive loss with cross-rank negatives and an optional queue of text negatives."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import dist as d


class ClipLoss(nn.Module):
    def __init__(self, cfg, embed_dim: int, device):
        super().__init__()
        self.cfg = cfg.loss
        self.aux_weight = cfg.loss.aux_weight
        self._labels = {}
        if self.cfg.neg_queue_size <= 0:
            self.queue = None
        else:
            # extra text negatives from earlier steps (MoCo-style), kept on the device
            self.register_buffer(
                "queue", F.normalize(torch.randn(self.cfg.neg_queue_size, embed_dim, device=device), dim=-1))
            self.queue_ptr = 0

    def _targets(self, n: int, device) -> torch.Tensor:
        key = (n, device)
        if key not in self._labels:
            offset = n * d.rank() if self.cfg.local_loss else 0
            self._labels[key] = torch.arange(n, device=device) + offset
        return self._labels[key]

    def forward(self, out: dict, labels: torch.Tensor | None = None) -> dict:
        img, txt, scale = out["image_features"], out["text_features"], out["logit_scale"]
        all_img = d.gather_features(img, self.cfg.gather_with_grad)
        all_txt = d.gather_features(txt, self.cfg.gather_with_grad)
        if self.cfg.local_loss:
            logits_i = scale * img @ all_txt.T
            logits_t = scale * txt @ all_img.T
        else:
            logits_i = scale * all_img @ all_txt.T
            logits_t = logits_i.T
        if self.queue is not None:
            logits_i = torch.cat([logits_i, scale * all_img @ self.queue.T.to(all_img.dtype)], dim=1)
        tgt = self._targets(logits_t.shape[0], img.device)
        contrastive = 0.5 * (F.cross_entropy(logits_i, tgt) + F.cross_entropy(logits_t, tgt))
        losses = {"contrastive": contrastive}
        total = contrastive
        if "aux_logits" in out and labels is not None:
            aux = F.cross_entropy(out["aux_logits"].float(), labels)
            losses["aux"] = aux
            total = total + self.aux_weight * aux
        losses["loss"] = total
        return losses
