"""Two-tower retrieval trainer (sequential user tower, hashed item features)."""
__version__ = "0.4.2"
