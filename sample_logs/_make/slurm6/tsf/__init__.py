"""tsf: a small multivariate time-series forecaster (patch MLP) trained with DDP on CPU/gloo."""
__version__ = "0.4.2"
