"""Tiny transformer sequence-to-sequence translation package."""
__version__ = "0.3.1"
