"""ddpmlite: a small DDPM image diffusion trainer (UNet, EMA, AMP, DDP)."""
__version__ = "0.4.2"
