"""sftkit: a small supervised fine-tuning framework (LoRA / DDP / FSDP2)."""
__version__ = "0.4.2"
