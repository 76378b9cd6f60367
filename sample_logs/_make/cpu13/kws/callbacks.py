import json
import os

import torch
import lightning as L


class PredictionDumper(L.Callback):
    """Writes per-rank validation predictions to <dirpath>/preds_rank{N}.jsonl for error analysis."""

    def __init__(self, dirpath):
        self.dirpath = dirpath

    def setup(self, trainer, pl_module, stage):
        if trainer.is_global_zero:
            os.makedirs(self.dirpath, exist_ok=True)
            self.buffer = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        preds = outputs["logits"].argmax(-1).tolist()
        self.buffer.extend(zip(batch["index"].tolist(), preds, batch["label"].tolist()))

    def on_validation_epoch_end(self, trainer, pl_module):
        path = os.path.join(self.dirpath, f"preds_rank{trainer.global_rank}.jsonl")
        with open(path, "w") as f:
            for idx, pred, lab in self.buffer:
                f.write(json.dumps({"index": idx, "pred": pred, "label": lab}) + "\n")
        self.buffer = []


class EpochSummary(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            m = {k: round(float(v), 4) for k, v in trainer.callback_metrics.items()}
            print(f"epoch {trainer.current_epoch} done: {m}", flush=True)
