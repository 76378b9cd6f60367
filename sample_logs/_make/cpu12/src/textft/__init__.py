"""textft: small utilities for fine-tuning / continued pretraining of causal LMs on local jsonl text."""
__version__ = "0.3.1"
