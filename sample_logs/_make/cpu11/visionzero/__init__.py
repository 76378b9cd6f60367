"""visionzero: a small ZeRO-1 data-parallel image classifier trainer (CPU/gloo or CUDA/NCCL)."""
__version__ = "0.3.1"
