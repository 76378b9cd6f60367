"""tinyrl: a small GRPO trainer (policy + frozen reference + reward model in one job)."""
__version__ = "0.3.1"
