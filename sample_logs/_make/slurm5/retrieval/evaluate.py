"""Full-catalogue retrieval metrics (recall@k, MRR) on a rank's eval shard."""
import logging
import time

import numpy as np
import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@torch.no_grad()
def item_matrix(model, n_items, chunk=8192):
    vecs = [model.item(torch.arange(s, min(s + chunk, n_items))) for s in range(0, n_items, chunk)]
    return torch.cat(vecs).numpy()


@torch.no_grad()
def user_vectors(model, hist, batch_size):
    out = []
    for s in range(0, len(hist), batch_size):
        out.append(model.user(torch.from_numpy(hist[s:s + batch_size])))
    return torch.cat(out).numpy()


@torch.no_grad()
def evaluate(model, hist, hist_len, target, cfg, n_items):
    t0 = time.time()
    keep = hist_len >= cfg["min_history"]
    hist, target = hist[keep], target[keep]
    k = cfg["k"]
    log.info("eval: %d users with >= %d interactions, catalogue %d, k=%d", len(target), cfg["min_history"], n_items, k)
    items = item_matrix(model, n_items)
    chunk = cfg.get("chunk_users", 0)
    if chunk:
        u_all = user_vectors(model, hist, cfg["batch_size"])
        hits = rr = 0.0
        for s in range(0, len(u_all), chunk):
            u, t = u_all[s:s + chunk], target[s:s + chunk]
            sc = u @ items.T
            sc[:, 0] = -np.inf
            top = np.argpartition(-sc, k, axis=1)[:, :k]
            hits += float((top == t[:, None]).any(1).sum())
            ranks = (sc > sc[np.arange(len(u)), t][:, None]).sum(1) + 1
            rr += float((1.0 / ranks).sum())
    else:
        # one dense score matrix for the whole shard, ranked in one go
        scores = np.empty((len(target), n_items), dtype=np.float32)
        u = user_vectors(model, hist, cfg["batch_size"])
        np.matmul(u, items.T, out=scores)
        scores[:, 0] = -np.inf
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        hits = float((top == target[:, None]).any(1).sum())
        ranks = (scores > scores[np.arange(len(u)), target][:, None]).sum(1) + 1
        rr = float((1.0 / ranks).sum())
    stats = torch.tensor([hits, rr, float(len(target))], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(stats)
    n = max(stats[2].item(), 1.0)
    log.info("eval done in %.1fs", time.time() - t0)
    return {f"recall@{k}": stats[0].item() / n, "mrr": stats[1].item() / n, "users": int(stats[2].item())}
