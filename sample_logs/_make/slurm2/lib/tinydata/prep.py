import torch


def compute_feature_stats(x, eps=1e-6):
    """Per-feature mean/std used to normalise inputs on the fly."""
    mean = x.mean(dim=0)
    std = x.std(dim=0).clamp_min(eps)
    return {"mean": mean, "std": std, "rows": torch.tensor(x.shape[0])}


def save_stats(stats, path):
    tmp = path + ".tmp"
    torch.save(stats, tmp)
    import os
    os.replace(tmp, path)
