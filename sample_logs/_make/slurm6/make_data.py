"""Synthetic weather-station data: data/{train,holdout}/<id>.csv, stations.json (rank shards), hierarchy.csv.

    python make_data.py --out data --ranks 4 [--defect NAME]
"""
import argparse
import json
from pathlib import Path

import numpy as np

CH = 8
T_TRAIN = 631          # 512 windows of 96+24 per station
T_HOLD = 96 + 24 * 8
T0 = 1_698_000_000 - 1_698_000_000 % 3600


def series(rng, n, step):
    t = np.arange(n) * step / 3600.0
    base = np.stack([np.sin(2 * np.pi * t / 24 + k) * (1 + 0.1 * k) for k in range(CH)], 1)
    return (base + 0.1 * rng.standard_normal((n, CH))).astype(np.float32)


def write_csv(path, ts, vals, na_at=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write("ts," + ",".join(f"c{k}" for k in range(CH)) + "\n")
        for i, (t, row) in enumerate(zip(ts, vals)):
            cells = [f"{v:.4f}" for v in row]
            if na_at is not None and i == na_at:
                cells[4] = "NA"
            f.write(f"{int(t)}," + ",".join(cells) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--defect", default="none")
    a = ap.parse_args()
    out = Path(a.out)
    rng = np.random.default_rng(0)
    stations, shards, hier = [], {}, []
    for r in range(a.ranks):
        shards[str(r)] = []
        for j in range(3 if (a.defect == "extra_station" and r == 2) else 2):
            sid = f"ST{r}{j:02d}"
            if a.defect == "numeric_ids" and r == 2:
                sid = 72790 + j
            n, step = T_TRAIN, 3600
            if a.defect == "short_shard" and r == 1 and j == 1:
                n = 607
            if a.defect == "minute_export" and r == 2 and j == 0:
                n, step = 525_600, 60
            ts = T0 + np.arange(n) * step
            write_csv(out / "train" / f"{sid}.csv", ts, series(rng, n, step),
                      na_at=532 if (a.defect == "na_token" and r == 3 and j == 1) else None)
            hts = ts[-1] + step + np.arange(T_HOLD) * step
            hv = series(rng, T_HOLD, step)
            if a.defect == "dst_holdout" and r == 1 and j == 0:
                # local-time export across the fall-back night: 01:00-01:59 appears twice
                hts = np.concatenate([hts[:50], hts[49:-1]])
            write_csv(out / "holdout" / f"{sid}.csv", hts, hv)
            stations.append({"id": sid, "file": f"{sid}.csv", "freq_s": step, "region": f"R{r}"})
            shards[str(r)].append(sid)
            hier.append((str(sid), f"R{r}"))
        hier.append((f"R{r}", "NATION"))
    if a.defect == "deep_hierarchy":
        # grid-cell export joined on the wrong key: every cell became the parent of the next one
        hier = [h for h in hier if not h[0].startswith("R3")]
        hier.append(("R3", "G0"))
        hier += [(f"G{i}", f"G{i + 1}") for i in range(400_000)]
    with open(out / "stations.json", "w") as f:
        json.dump({"stations": stations, "shards": shards}, f, indent=1)
    with open(out / "hierarchy.csv", "w") as f:
        f.write("child,parent\n")
        f.writelines(f"{c},{p}\n" for c, p in hier)


if __name__ == "__main__":
    main()
