"""Write image grids as PNG with numpy + zlib only."""
import struct
import zlib

import numpy as np


def _chunk(tag, data):
    c = struct.pack(">I", len(data)) + tag + data
    return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def write_png(path, img):
    """img: HxWx3 uint8."""
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[r].tobytes() for r in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(_chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(_chunk(b"IEND", b""))


def to_grid(x, nrow=None):
    """x: N x 3 x H x W in [-1, 1] (numpy) -> grid uint8."""
    n, c, h, w = x.shape
    nrow = nrow or int(np.ceil(np.sqrt(n)))
    ncol = int(np.ceil(n / nrow))
    grid = np.zeros((ncol * (h + 2) + 2, nrow * (w + 2) + 2, 3), dtype=np.uint8)
    imgs = ((np.clip(x, -1, 1) + 1) * 127.5).round().astype(np.uint8).transpose(0, 2, 3, 1)
    for i, im in enumerate(imgs):
        r, q = divmod(i, nrow)
        grid[2 + r * (h + 2):2 + r * (h + 2) + h, 2 + q * (w + 2):2 + q * (w + 2) + w] = im
    return grid
