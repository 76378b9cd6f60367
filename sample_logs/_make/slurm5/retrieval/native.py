"""ctypes binding of native/libfhash.so (FNV-1a feature hashing, ~20x faster than zlib in Python)."""
import ctypes
import os

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB = os.environ.get("RETRIEVAL_FHASH_LIB", os.path.join(_HERE, "..", "native", "libfhash.so"))


class _FHash:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.fhash_tokens.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int64, ctypes.c_uint32,
                                          ctypes.POINTER(ctypes.c_int64)]
        self.lib.fhash_tokens.restype = None

    def hash_tokens(self, tokens, buckets):
        n = len(tokens)
        arr = (ctypes.c_char_p * n)()
        # accept str or already-encoded bytes
        arr[:] = [t.encode("utf-8") if isinstance(t, str) else t for t in tokens]
        out = np.empty(n, dtype=np.int64)
        self.lib.fhash_tokens(arr, n, buckets, out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
        return out


def load():
    return _FHash(os.path.normpath(_LIB))
