import os

import numpy as np

PALETTE = np.array([[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25]], np.uint8)


def overlay(img, label, alpha=0.45):
    rgb = np.repeat(img[..., None], 3, axis=2).astype(np.float32)
    col = PALETTE[label % len(PALETTE)].astype(np.float32)
    out = (1 - alpha) * rgb + alpha * col
    return out.clip(0, 255).astype(np.uint8)


def write_ppm(path, rgb):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h, w, _ = rgb.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(rgb.tobytes())
