"""ditlite: a small latent-diffusion transformer (DiT) training stack."""
__version__ = "0.3.1"
