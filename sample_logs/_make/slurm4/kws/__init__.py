"""kws: tiny keyword-spotting / image-classification training stack used by train.py."""
__version__ = "0.4.1"
