"""Collators for causal LM training."""
import torch


class CausalLMCollator:
    """Pads input_ids, builds attention_mask and labels (-100 on padding)."""

    def __init__(self, tokenizer, pad_to_multiple_of=None):
        self.pad_id = tokenizer.pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def _target_len(self, lengths):
        n = max(lengths)
        m = self.pad_to_multiple_of
        if m:
            n = ((n + m - 1) // m) * m
        return n

    def __call__(self, features):
        ids = [list(f["input_ids"]) for f in features]
        lengths = [len(x) for x in ids]
        n = self._target_len(lengths)
        input_ids = torch.full((len(ids), n), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), n), dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
        # labels: same tokens, padding ignored by the loss
        labels = torch.full((len(ids), max(lengths)), -100, dtype=torch.long)
        for i, x in enumerate(ids):
            labels[i, : len(x)] = torch.tensor(x)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
