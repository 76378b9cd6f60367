import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L


class KeywordSpotter(L.LightningModule):
    def __init__(self, num_classes=12, sample_rate=8000, clip_seconds=1.0, channels=32,
                 hidden=64, lr=3e-3, weight_decay=1e-4, warmup_steps=20):
        super().__init__()
        self.save_hyperparameters()
        self.frontend = nn.Sequential(
            nn.Conv1d(1, channels, kernel_size=80, stride=8, padding=36), nn.BatchNorm1d(channels), nn.ReLU(),
            nn.Conv1d(channels, channels, kernel_size=3, stride=2, padding=1), nn.BatchNorm1d(channels), nn.ReLU(),
            nn.Conv1d(channels, channels, kernel_size=3, stride=2, padding=1), nn.BatchNorm1d(channels), nn.ReLU(),
            nn.MaxPool1d(4),
        )
        frames = int(sample_rate * clip_seconds) // 8 // 2 // 2 // 4
        self.proj = nn.Linear(channels * (frames // 4), hidden)
        self.pool = nn.AvgPool1d(4)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, wav):
        x = self.frontend(wav)
        x = self.pool(x).flatten(1)
        return self.head(F.relu(self.proj(x)))

    def _step(self, batch, stage):
        logits = self(batch["wav"])
        loss = F.cross_entropy(logits, batch["label"])
        acc = (logits.argmax(-1) == batch["label"]).float().mean()
        self.log(f"{stage}_loss", loss, prog_bar=True, sync_dist=stage != "train")
        self.log(f"{stage}_acc", acc, prog_bar=stage != "train", sync_dist=stage != "train")
        return loss, logits

    def training_step(self, batch, batch_idx):
        loss, _ = self._step(batch, "train")
        return loss

    def validation_step(self, batch, batch_idx):
        _, logits = self._step(batch, "val")
        return {"logits": logits.detach(), "index": batch["index"]}

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        total = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr, total_steps=total,
                                                    pct_start=min(0.3, self.hparams.warmup_steps / max(total, 1)))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
