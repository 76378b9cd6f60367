"""clipforge: a small CLIP-style contrastive image/text trainer."""
__version__ = "0.4.1"
