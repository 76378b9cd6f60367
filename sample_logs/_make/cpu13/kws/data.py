import glob
import json
import os

import numpy as np
import torch
import lightning as L
from torch.utils.data import DataLoader, Dataset


class ShardDataset(Dataset):
    """Holds (optionally pre-featurised) clips of one or more .npz shards."""

    def __init__(self, files, clip_samples, precompute=False, augment=None):
        wavs, labels = [], []
        for f in files:
            with np.load(f) as z:
                wav = z["wav"]
                lab = z["label"]
            wavs.append(torch.from_numpy(wav.astype(np.float32) / 32768.0))
            labels.append(torch.from_numpy(lab.astype(np.int64)))
        self.clip_samples = clip_samples
        self.labels = torch.cat(labels)
        if precompute:
            # energy-normalise whole recordings once, then cut to the clip length
            feats = []
            for w in wavs:
                spec = torch.stft(w, n_fft=256, hop_length=64, window=torch.hann_window(256),
                                  return_complex=True)
                gain = spec.abs().pow(2).mean(dim=(1, 2), keepdim=True).sqrt().clamp_min(1e-4)
                feats.append(w[:, :clip_samples] / gain[:, 0, :1])
            self.wavs = torch.cat(feats)
        else:
            self.wavs = torch.cat([w[:, :clip_samples] for w in wavs])
        self.augment = augment

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        w = self.wavs[i]
        if self.augment is not None:
            w = self.augment(w)
        return {"wav": w, "label": self.labels[i], "index": i}


def pad_collate(batch):
    wav = torch.stack([b["wav"] for b in batch])
    label = torch.stack([b["label"] for b in batch])
    index = torch.tensor([b["index"] for b in batch])
    return {"wav": wav.unsqueeze(1), "label": label, "index": index}


class KWSDataModule(L.LightningDataModule):
    """Shards are split across ranks by file (rank::world_size), webdataset style."""

    def __init__(self, data_dir, batch_size=32, num_workers=0, clip_samples=8000,
                 precompute_features=False, augment=None):
        super().__init__()
        self.save_hyperparameters()

    def _files(self, split):
        files = sorted(glob.glob(os.path.join(self.hparams.data_dir, split, "*.npz")))
        if not files:
            raise FileNotFoundError(f"no shards found under {self.hparams.data_dir}/{split}")
        return files

    def setup(self, stage=None):
        rank = self.trainer.global_rank if self.trainer is not None else 0
        world = self.trainer.world_size if self.trainer is not None else 1
        augment = None
        if self.hparams.augment == "speed_perturb":
            from kws.augment import SpeedPerturb
            augment = SpeedPerturb()
        train_files = self._files("train")[rank::world]
        val_files = self._files("val")[rank::world] or self._files("val")[:1]
        self.train_ds = ShardDataset(train_files, self.hparams.clip_samples,
                                     self.hparams.precompute_features, augment)
        self.val_ds = ShardDataset(val_files, self.hparams.clip_samples,
                                   self.hparams.precompute_features)
        print(f"[data] rank {rank}/{world}: {len(self.train_ds)} train clips from "
              f"{[os.path.basename(f) for f in train_files]}, {len(self.val_ds)} val clips", flush=True)

    def train_dataloader(self):
        return DataLoader(self.train_ds, batch_size=self.hparams.batch_size, shuffle=True,
                          num_workers=self.hparams.num_workers, collate_fn=pad_collate, drop_last=True)

    def val_dataloader(self):
        return DataLoader(self.val_ds, batch_size=self.hparams.batch_size,
                          num_workers=self.hparams.num_workers, collate_fn=pad_collate)
