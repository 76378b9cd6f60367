"""lm: a small GPT-style language-model pretraining package."""
__version__ = "0.3.1"
