"""ctypes binding for kws/native/libspecops.so (built by `make -C kws/native`)."""

from __future__ import annotations

import ctypes
import os

import numpy as np

_LIB = None
_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")


def _lib():
    global _LIB
    if _LIB is None:
        path = os.environ.get("SPECOPS_LIB", os.path.join(_HERE, "libspecops.so"))
        lib = ctypes.CDLL(path)
        lib.specops_smooth_cmvn.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint,
        ]
        lib.specops_smooth_cmvn.restype = None
        lib.specops_version.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def version():
    return _lib().specops_version()


def smooth_cmvn(feat: np.ndarray) -> np.ndarray:
    feat = np.ascontiguousarray(feat, dtype=np.float32)
    out = np.empty_like(feat)
    t, f = feat.shape
    _lib().specops_smooth_cmvn(feat.ctypes.data, out.ctypes.data, t, f)
    return out
