"""Station CSVs -> standardized sliding windows; holdout loading, seasonality, smoothing, region hierarchy."""
import json
import logging
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

log = logging.getLogger("tsf.data")


@dataclass
class Scaler:
    mean: np.ndarray
    std: np.ndarray

    def __call__(self, x):
        return (x - self.mean) / self.std


def load_meta(root):
    with open(Path(root) / "stations.json") as f:
        return json.load(f)


def read_station(path):
    arr = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64)
    return arr[:, 0].astype(np.int64), arr[:, 1:].astype(np.float32)


def regularize(ts, vals, step):
    """Put a series on a regular `step` grid; missing slots are filled by carrying the last value forward."""
    out_t, out_v = [ts[0]], [vals[0]]
    i, t = 1, ts[0]
    while i < len(ts):
        nxt = t + step
        if ts[i] == nxt:
            out_t.append(ts[i]); out_v.append(vals[i])
            t, i = nxt, i + 1
        elif ts[i] > nxt:
            out_t.append(nxt); out_v.append(out_v[-1])
            t = nxt
        else:
            # sample earlier than the next slot: wait for the grid to catch up
            continue
    return np.asarray(out_t), np.stack(out_v)


def smooth(vals, method, window):
    if method == "none":
        return vals
    if method == "ema":
        out = np.empty_like(vals)
        a = 2.0 / (window + 1)
        out[0] = vals[0]
        for t in range(1, len(vals)):
            out[t] = a * vals[t] + (1 - a) * out[t - 1]
        return out
    if method == "savgol":
        from scipy.signal import savgol_filter
        return savgol_filter(vals, window, 2, axis=0).astype(np.float32)
    raise ValueError(f"unknown smoothing {method!r}")


def seasonal_period(vals, max_lag):
    """Pick the lag with the strongest autocorrelation (used as m for MASE)."""
    v = vals.astype(np.float64)
    lagmat = np.lib.stride_tricks.sliding_window_view(v, max_lag + 1, axis=0).copy()  # (T-max_lag, C, max_lag+1)
    cur = lagmat[:, :, -1:]
    err = np.abs(cur - lagmat[:, :, :-1]).mean(axis=(0, 1))
    return int(max_lag - np.argmin(err[::-1][:-1]) - 1) or 1


def region_tree(hier_csv, station_ids):
    parent = {}
    with open(hier_csv) as f:
        next(f)
        for line in f:
            child, par = line.strip().split(",")
            parent[child] = par
    tree = {}
    for sid in station_ids:
        chain = [sid]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        node = tree
        for name in reversed(chain):
            node = node.setdefault(name, {})
    return tree


def cache_tree(tree, path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(tree, f)


class Windows(Dataset):
    def __init__(self, series, context, horizon):
        self.series, self.context, self.horizon = series, context, horizon
        self.index = []
        for s, x in enumerate(series):
            for t in range(len(x) - context - horizon + 1):
                self.index.append((s, t))

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        s, t = self.index[i]
        x = self.series[s]
        c = self.context
        return torch.from_numpy(x[t:t + c]), torch.from_numpy(x[t + c:t + c + self.horizon])
