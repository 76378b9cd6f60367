import numpy as np


def image_and_mask(rng, h, w, n_blobs=4, empty=False):
    yy, xx = np.mgrid[0:h, 0:w]
    img = rng.normal(70, 12, (h, w))
    msk = np.zeros((h, w), np.uint8)
    if not empty:
        for _ in range(n_blobs):
            c = rng.integers(1, 3)
            cy, cx = rng.uniform(0, h), rng.uniform(0, w)
            r = rng.uniform(min(h, w) * 0.06, min(h, w) * 0.18)
            inside = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
            msk[inside] = c
            img[inside] += 60 * c
    return img.clip(0, 255).astype(np.uint8), msk


def shard(rng, n, h, w, empty=False):
    imgs = np.zeros((n, h, w), np.uint8)
    msks = np.zeros((n, h, w), np.uint8)
    for i in range(n):
        imgs[i], msks[i] = image_and_mask(rng, h, w, empty=empty)
    return imgs, msks
