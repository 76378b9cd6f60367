"""Sliding-window inference and stitching back to the original resolution."""
import numpy as np
import torch
import torch.nn.functional as F


def _starts(size, win, stride):
    s = list(range(0, max(size - win, 0) + 1, stride))
    if s[-1] + win < size:
        s.append(s[-1] + stride)
    return s


@torch.no_grad()
def sliding_window(model, img, num_classes, win, stride):
    h, w = img.shape
    x = torch.from_numpy(img.astype(np.float32) / 255.0)[None, None]
    out = torch.zeros(num_classes, h, w)
    cnt = torch.zeros(1, h, w)
    for y in _starts(h, win, stride):
        for xx in _starts(w, win, stride):
            tile = x[:, :, y:y + win, xx:xx + win]
            logits = model(tile)[0]
            out[:, y:y + win, xx:xx + win] += logits
            cnt[:, y:y + win, xx:xx + win] += 1
    return out / cnt


def stitch_to_original(prob, orig_hw):
    """Accumulate class scores on the original pixel grid (nearest upsampling), return label map."""
    c, h, w = prob.shape
    oh, ow = orig_hw
    acc = np.zeros((c, oh, ow), dtype=np.float32)
    ys = (np.arange(oh) * h // oh)
    xs = (np.arange(ow) * w // ow)
    p = prob.numpy()
    for k in range(c):
        acc[k] = p[k][ys][:, xs]
    return acc.argmax(0)


def dice_per_class(pred, target, num_classes):
    d = np.zeros(num_classes, np.float64)
    for c in range(num_classes):
        a, b = pred == c, target == c
        d[c] = (2.0 * (a & b).sum() + 1.0) / (a.sum() + b.sum() + 1.0)
    return d
