"""Optional compiled kernels. Build with `python tools/build_ops.py` (needs nvcc)."""
