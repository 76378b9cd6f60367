"""GraphSAGE with explicit message passing (gather -> aggregate -> update)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def aggregate(msg, index, num_dst, aggr):
    if aggr == "mean":
        out = msg.new_zeros(num_dst, msg.shape[1]).index_add_(0, index, msg)
        deg = torch.bincount(index, minlength=num_dst).clamp_(min=1).unsqueeze(1)
        return out / deg
    if aggr == "sum":
        return msg.new_zeros(num_dst, msg.shape[1]).index_add_(0, index, msg)
    if aggr == "max":
        from torch_scatter import scatter_max  # optional fast path
        return scatter_max(msg, index, dim=0, dim_size=num_dst)[0]
    raise ValueError(f"unknown aggregation {aggr!r}")


class SAGEConv(nn.Module):
    def __init__(self, d_in, d_out, aggr="mean"):
        super().__init__()
        self.aggr = aggr
        self.lin_self = nn.Linear(d_in, d_out)
        self.lin_neigh = nn.Linear(d_in, d_out, bias=False)

    def forward(self, h, block):
        msg = h[block.edge_src]                      # gather: one message per sampled edge
        agg = aggregate(msg, block.edge_dst, block.num_dst, self.aggr)
        return self.lin_self(h[:block.num_dst]) + self.lin_neigh(agg)


class GraphSAGE(nn.Module):
    def __init__(self, d_in, hidden, n_classes, layers=2, aggr="mean", dropout=0.2):
        super().__init__()
        dims = [d_in] + [hidden] * (layers - 1) + [n_classes]
        self.convs = nn.ModuleList(SAGEConv(a, b, aggr) for a, b in zip(dims[:-1], dims[1:]))
        if aggr == "max":
            aggregate(torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), 1, aggr)
        self.dropout = dropout

    def forward(self, x, blocks):
        h = x
        for i, (conv, blk) in enumerate(zip(self.convs, blocks)):
            h = conv(h, blk)
            if i < len(self.convs) - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return h
