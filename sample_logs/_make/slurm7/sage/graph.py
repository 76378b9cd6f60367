"""Graph partitions (CSR in .npz) and a uniform neighbour sampler producing message-passing blocks."""
import logging
import os

import numpy as np
import torch

log = logging.getLogger("sage.graph")


class Partition:
    def __init__(self, root, part):
        path = os.path.join(root, f"part-{part:02d}.npz")
        z = np.load(path)
        self.indptr = z["indptr"]
        self.indices = z["indices"]
        self.feats = torch.from_numpy(z["feats"])
        self.labels = torch.from_numpy(z["labels"].astype(np.int64))
        self.train_idx = z["train_idx"]
        self.val_idx = z["val_idx"]
        self.halo_out = z["halo_out"]
        self.halo_in = int(z["halo_in"])
        self.num_nodes = self.indptr.shape[0] - 1
        self.num_edges = self.indices.shape[0]
        log.info("partition %d: %d nodes, %d edges, %d feats, %d train / %d val",
                 part, self.num_nodes, self.num_edges, self.feats.shape[1],
                 len(self.train_idx), len(self.val_idx))


class Block:
    __slots__ = ("src_nodes", "num_dst", "edge_src", "edge_dst")

    def __init__(self, src_nodes, num_dst, edge_src, edge_dst):
        self.src_nodes, self.num_dst = src_nodes, num_dst
        self.edge_src, self.edge_dst = edge_src, edge_dst


class NeighborSampler:
    def __init__(self, g, fanouts, seed=0):
        self.g, self.fanouts = g, list(fanouts)
        self.rng = np.random.default_rng(seed)

    def _neighbors(self, nodes, fanout):
        start, end = self.g.indptr[nodes], self.g.indptr[nodes + 1]
        deg = end - start
        if fanout < 0:  # full neighbourhood
            dst = np.repeat(np.arange(len(nodes)), deg)
            offs = np.arange(deg.sum()) - np.repeat(np.cumsum(deg) - deg, deg)
            src = self.g.indices[np.repeat(start, deg) + offs]
            return src, dst
        r = self.rng.random((len(nodes), fanout))
        pick = start[:, None] + (r * np.maximum(deg, 1)[:, None]).astype(np.int64)
        keep = np.broadcast_to((deg > 0)[:, None], pick.shape)
        dst = np.broadcast_to(np.arange(len(nodes))[:, None], pick.shape)[keep]
        return self.g.indices[pick[keep]], dst

    def sample(self, seeds):
        blocks = []
        nodes = np.asarray(seeds)
        for fanout in reversed(self.fanouts):
            src, dst = self._neighbors(nodes, fanout)
            uniq, inv = np.unique(np.concatenate([nodes, src]), return_inverse=True)
            # keep the destination nodes first so that h[:num_dst] are the targets
            order = np.concatenate([nodes, np.setdiff1d(uniq, nodes, assume_unique=True)])
            remap = np.empty(uniq.max() + 1, dtype=np.int64)
            remap[order] = np.arange(len(order))
            blocks.insert(0, Block(torch.from_numpy(order), len(nodes),
                                   torch.from_numpy(remap[src]), torch.from_numpy(dst)))
            nodes = order
        return nodes, blocks


def batches(idx, batch_size, rng, shuffle=True):
    idx = np.array(idx)
    if shuffle:
        rng.shuffle(idx)
    for i in range(0, len(idx), batch_size):
        yield idx[i:i + batch_size]
