import torch
import torch.nn.functional as F


def soft_dice(logits, target, num_classes, eps=1.0):
    prob = logits.softmax(1)
    onehot = F.one_hot(target, num_classes).permute(0, 3, 1, 2).float()
    inter = (prob * onehot).sum((0, 2, 3))
    denom = prob.sum((0, 2, 3)) + onehot.sum((0, 2, 3))
    return 1 - ((2 * inter + eps) / (denom + eps)).mean()


class BoundaryLoss:
    """Kervadec et al. boundary loss on signed distance maps of the target."""

    def __init__(self, num_classes):
        from scipy.ndimage import distance_transform_edt  # heavy import, only when enabled
        self.edt = distance_transform_edt
        self.num_classes = num_classes

    def __call__(self, logits, target):
        import numpy as np
        t = target.numpy()
        dist = np.zeros((t.shape[0], self.num_classes) + t.shape[1:], np.float32)
        for b in range(t.shape[0]):
            for c in range(1, self.num_classes):
                pos = t[b] == c
                if pos.any():
                    dist[b, c] = self.edt(~pos) - (self.edt(pos) - 1) * pos
        return (logits.softmax(1) * torch.from_numpy(dist)).mean()


class SegLoss:
    def __init__(self, cfg, num_classes):
        w = cfg.get("class_weights")
        self.weight = torch.tensor(w, dtype=torch.float32) if w else None
        self.dice_w = cfg.get("dice_weight", 1.0)
        self.num_classes = num_classes
        self.boundary = None
        self.boundary_w = cfg.get("boundary_weight", 0.0)
        if self.boundary_w > 0:
            self.boundary = BoundaryLoss(num_classes)

    def __call__(self, logits, target):
        loss = F.cross_entropy(logits, target, weight=self.weight)
        loss = loss + self.dice_w * soft_dice(logits, target, self.num_classes)
        if self.boundary is not None:
            loss = loss + self.boundary_w * self.boundary(logits, target)
        return loss
