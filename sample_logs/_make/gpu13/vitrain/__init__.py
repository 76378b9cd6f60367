"""vitrain: a compact Vision Transformer image-classification trainer."""
__version__ = "0.4.2"
