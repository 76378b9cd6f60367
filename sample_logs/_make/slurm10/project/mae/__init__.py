"""Tiny masked-autoencoder (MAE) ViT pretraining on synthetic images, DDP over gloo."""
__version__ = "0.3.1"
